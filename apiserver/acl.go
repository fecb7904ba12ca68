package apiserver

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// Rights per key prefix.
//
// A Tokens set holds named API tokens, each with rules in the manner of
// Consul's key_prefix rules: a rule gives a right (deny, read, lock, admin)
// on every key that starts with its prefix, and for a given key the rule with
// the longest matching prefix decides; a key no rule matches gets nothing.
// lock implies read and admin implies lock. What each route needs is said
// once, in its routeDoc (openapi.go: right, served as x-raftlock-right in GET
// /v1/openapi.json), which tests check against the route table and the
// README's table of routes.
//
// The shared Config.Token, when set, is a token named "shared" with admin
// on "" (everything), as it always was. A node with neither Config.Token nor
// Config.Tokens requires no token and everyone may do everything.

// right is the decoded form of a rule's right; higher implies lower.
type right uint8

const (
	rightDeny right = iota
	rightRead
	rightLock
	rightAdmin
)

var rightNames = [...]string{rightDeny: api.RightDeny, rightRead: api.RightRead, rightLock: api.RightLock, rightAdmin: api.RightAdmin}

func (r right) String() string { return rightNames[r] }

func parseRight(s string) (right, bool) {
	for r, name := range rightNames {
		if s == name {
			return right(r), true
		}
	}
	return 0, false
}

// Token is one named API token as an embedder gives it (Config.Tokens) or
// a token file holds it.
type Token struct {
	// Name identifies the token in logs, audit lines and /v1/whoami: 1 to
	// 64 letters, digits, '.', '_' or '-'. "shared" and "anonymous" are
	// reserved.
	Name string
	// Secret is what clients send (Authorization: Bearer SECRET): at least
	// MinSecretLen bytes of visible ASCII without spaces (ValidateSecret).
	// It is never logged or answered.
	Secret string
	// SecretSHA256, instead of Secret, is the secret's SHA-256 in hex (64
	// digits: printf %s "$SECRET" | sha256sum), so that the token file
	// need not hold the secret itself. Give one of the two.
	SecretSHA256 string
	// Rules give the token its rights; at most one rule per prefix.
	Rules []api.TokenRule
}

// MinSecretLen is the shortest secret a node accepts, the shared token's
// and every named token's (ValidateSecret): guessing one must be out of
// reach (32 hex digits from crypto/rand is a good secret).
const MinSecretLen = 16

// Reserved token names.
const (
	SharedTokenName    = "shared"    // Config.Token
	AnonymousTokenName = "anonymous" // everyone, on a node that requires no token
)

// Tokens is a validated, immutable set of named tokens: make one with
// NewTokens, ParseTokens or LoadTokens, give it to Config.Tokens or
// Handler.SetTokens.
type Tokens struct {
	list []*caller
}

// caller is one token as the handler checks it.
type caller struct {
	name  string
	hash  [sha256.Size]byte
	rules []rule // longest prefix first
}

type rule struct {
	prefix string
	right  right
}

// TokenError is what is wrong with a set of tokens or a token file: where
// (the file, the line of the token's entry, the JSON field) and what.
type TokenError struct {
	Path    string // the file; "" for tokens given in code
	Line    int    // 1-based line of the token's entry or of the syntax error; 0 if unknown
	Field   string // the field at fault: "tokens[2].rules[0].right"; "" for the file as a whole
	Problem string
}

func (e *TokenError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		fmt.Fprintf(&b, "token file %s: ", e.Path)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "%s: ", e.Field)
	}
	b.WriteString(e.Problem)
	return b.String()
}

// NewTokens validates tokens: each with a valid, unique name and a unique
// secret (see Token), each rule with a known right and a prefix of at most
// lock.MaxKeyLen bytes, no prefix twice in one token. The error is a
// *TokenError naming the field at fault.
func NewTokens(tokens []Token) (*Tokens, error) {
	return newTokens(tokens, "", nil)
}

func newTokens(tokens []Token, path string, lines []int) (*Tokens, error) {
	fail := func(i int, field, format string, args ...any) error {
		e := &TokenError{Path: path, Field: fmt.Sprintf("tokens[%d]", i), Problem: fmt.Sprintf(format, args...)}
		if field != "" {
			e.Field += "." + field
		}
		if i < len(lines) {
			e.Line = lines[i]
		}
		return e
	}
	t := &Tokens{}
	names := map[string]int{}
	secrets := map[[sha256.Size]byte]int{}
	for i, tok := range tokens {
		if err := validTokenName(tok.Name); err != nil {
			return nil, fail(i, "name", "%v", err)
		}
		if j, dup := names[tok.Name]; dup {
			return nil, fail(i, "name", "%q is also the name of tokens[%d]: give each token its own name", tok.Name, j)
		}
		names[tok.Name] = i
		c := &caller{name: tok.Name}
		secretField := "secret"
		switch {
		case tok.Secret != "" && tok.SecretSHA256 != "":
			return nil, fail(i, "secret", "give secret or secret_sha256, not both")
		case tok.SecretSHA256 != "":
			secretField = "secret_sha256"
			b, err := hex.DecodeString(tok.SecretSHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fail(i, secretField, "want the secret's SHA-256 as 64 hex digits (printf %%s \"$SECRET\" | sha256sum)")
			}
			copy(c.hash[:], b)
		default:
			if err := ValidateSecret(tok.Secret); err != nil {
				return nil, fail(i, "secret", "%v", err)
			}
			c.hash = sha256.Sum256([]byte(tok.Secret))
		}
		if j, dup := secrets[c.hash]; dup {
			return nil, fail(i, secretField, "the same secret as tokens[%d] (%q): give each token its own secret", j, tokens[j].Name)
		}
		secrets[c.hash] = i
		prefixes := map[string]int{}
		for k, r := range tok.Rules {
			field := fmt.Sprintf("rules[%d]", k)
			if len(r.Prefix) > lock.MaxKeyLen {
				return nil, fail(i, field+".prefix", "longer than %d bytes (a key's limit)", lock.MaxKeyLen)
			}
			if j, dup := prefixes[r.Prefix]; dup {
				return nil, fail(i, field+".prefix", "prefix %q is also in rules[%d]: one rule per prefix", r.Prefix, j)
			}
			prefixes[r.Prefix] = k
			rt, ok := parseRight(r.Right)
			if !ok {
				return nil, fail(i, field+".right", "unknown right %q: want read, lock, admin or deny", r.Right)
			}
			c.rules = append(c.rules, rule{prefix: r.Prefix, right: rt})
		}
		slices.SortFunc(c.rules, func(a, b rule) int {
			return cmp.Or(cmp.Compare(len(b.prefix), len(a.prefix)), strings.Compare(a.prefix, b.prefix))
		})
		t.list = append(t.list, c)
	}
	return t, nil
}

func validTokenName(name string) error {
	switch {
	case name == "":
		return errors.New("the name is empty: give every token a name (it is what logs and audit lines show)")
	case len(name) > 64:
		return fmt.Errorf("the name is longer than 64 bytes")
	case name == SharedTokenName || name == AnonymousTokenName:
		return fmt.Errorf("the name %q is reserved: choose another", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("the name %q holds %q: want letters, digits, '.', '_' or '-'", name, c)
		}
	}
	return nil
}

// ValidateSecret reports why secret cannot be one a node checks callers
// against, or nil: every secret, the shared token (Config.Token, the
// agent's -http-token and -http-token-file) and each named token's, must
// be at least MinSecretLen bytes of visible ASCII without spaces
// (api.ValidateToken). Its errors never quote the secret: they end up in
// logs.
func ValidateSecret(secret string) error {
	switch {
	case secret == "":
		return errors.New("the secret is empty: set a random one (32 hex digits from crypto/rand, e.g. openssl rand -hex 16)")
	case len(secret) < MinSecretLen:
		return fmt.Errorf("the secret is %d bytes, shorter than %d: use a long random one (e.g. openssl rand -hex 16)", len(secret), MinSecretLen)
	}
	if err := api.ValidateToken(secret); err != nil {
		return fmt.Errorf("the secret does not pass: %w (it travels in a header)", err)
	}
	return nil
}

// Names lists the tokens' names, in the order given.
func (t *Tokens) Names() []string {
	if t == nil {
		return nil
	}
	out := make([]string, len(t.list))
	for i, c := range t.list {
		out[i] = c.name
	}
	return out
}

// tokenEntry is one token of a token file.
type tokenEntry struct {
	Name         *string         `json:"name"`
	Secret       *string         `json:"secret"`
	SecretSHA256 *string         `json:"secret_sha256"`
	Rules        []api.TokenRule `json:"rules"`
}

// maxTokenFileBytes bounds a token file: thousands of tokens fit.
const maxTokenFileBytes = 16 << 20

// LoadTokens reads and validates a token file (see ParseTokens). The error
// names the file and, for a fault inside it, the line and the field.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &TokenError{Path: path, Problem: fmt.Sprintf("cannot read it: %v", err)}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return nil, &TokenError{Path: path, Problem: fmt.Sprintf("cannot read it: %v", err)}
	}
	if len(data) > maxTokenFileBytes {
		return nil, &TokenError{Path: path, Problem: fmt.Sprintf("larger than %d bytes", maxTokenFileBytes)}
	}
	return parseTokens(data, path)
}

// ParseTokens reads a token file's contents:
//
//	{
//	  "tokens": [
//	    {"name": "ops", "secret": "6f1c...", "rules": [{"prefix": "", "right": "admin"}]},
//	    {"name": "ci", "secret_sha256": "9b71...(64 hex digits)", "rules": [{"prefix": "ci/", "right": "lock"}]},
//	    {"name": "billing", "secret": "a9e4...", "rules": [
//	      {"prefix": "billing/", "right": "lock"},
//	      {"prefix": "", "right": "read"}
//	    ]}
//	  ]
//	}
//
// Unknown fields are errors (a misspelt "rule" must not silently grant
// nothing), and so is every fault NewTokens finds. The error is a
// *TokenError with the line and field at fault.
func ParseTokens(data []byte) (*Tokens, error) { return parseTokens(data, "") }

func parseTokens(data []byte, path string) (*Tokens, error) {
	fail := func(off int64, field, format string, args ...any) error {
		return &TokenError{Path: path, Line: lineAt(data, off), Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	// Syntax first, over the whole file, for an exact line.
	var probe any
	if err := json.Unmarshal(data, &probe); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return nil, fail(syn.Offset, "", "not valid JSON: %v", err)
		}
		return nil, fail(0, "", "not valid JSON: %v", err)
	}
	if _, ok := probe.(map[string]any); !ok {
		return nil, fail(0, "", `want a JSON object {"tokens": [...]}`)
	}
	// Then the structure, token by token, to know each one's line.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if _, err := dec.Token(); err != nil { // {
		return nil, fail(0, "", "%v", err)
	}
	var entries []tokenEntry
	var lines []int
	seenTokens := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fail(dec.InputOffset(), "", "%v", err)
		}
		if name, _ := tok.(string); name != "tokens" {
			return nil, fail(dec.InputOffset(), fmt.Sprint(tok), `unknown field: the file holds one field, "tokens"`)
		}
		if seenTokens {
			return nil, fail(dec.InputOffset(), "tokens", "given twice")
		}
		seenTokens = true
		if d, err := dec.Token(); err != nil || d != json.Delim('[') {
			return nil, fail(dec.InputOffset(), "tokens", "want a list of tokens [{...}, ...]")
		}
		for i := 0; dec.More(); i++ {
			start := dec.InputOffset()
			var e tokenEntry
			if err := dec.Decode(&e); err != nil {
				field := fmt.Sprintf("tokens[%d]", i)
				var typ *json.UnmarshalTypeError
				if errors.As(err, &typ) && typ.Field != "" {
					field += "." + typ.Field
					return nil, fail(start+skipSpace(data, start), field, "want %v, not JSON %s", typ.Type, typ.Value)
				}
				return nil, fail(start+skipSpace(data, start), field, "%v", strings.TrimPrefix(err.Error(), "json: "))
			}
			line := lineAt(data, start+skipSpace(data, start))
			field := fmt.Sprintf("tokens[%d]", i)
			switch {
			case e.Name == nil:
				return nil, &TokenError{Path: path, Line: line, Field: field + ".name", Problem: "missing: give every token a name"}
			case e.Secret == nil && e.SecretSHA256 == nil:
				return nil, &TokenError{Path: path, Line: line, Field: field + ".secret", Problem: "missing: give every token a secret (or its secret_sha256)"}
			case e.Rules == nil:
				return nil, &TokenError{Path: path, Line: line, Field: field + ".rules", Problem: `missing: give the token its rules, e.g. [{"prefix": "jobs/", "right": "lock"}]`}
			}
			entries = append(entries, e)
			lines = append(lines, line)
		}
		if _, err := dec.Token(); err != nil { // ]
			return nil, fail(dec.InputOffset(), "tokens", "%v", err)
		}
	}
	if !seenTokens {
		return nil, fail(0, "tokens", `missing: the file holds {"tokens": [...]}`)
	}
	tokens := make([]Token, len(entries))
	for i, e := range entries {
		tokens[i] = Token{Name: *e.Name, Rules: e.Rules}
		switch {
		case e.Secret != nil && e.SecretSHA256 != nil:
			return nil, &TokenError{Path: path, Line: lines[i], Field: fmt.Sprintf("tokens[%d].secret", i), Problem: "give secret or secret_sha256, not both"}
		case e.Secret != nil:
			tokens[i].Secret = *e.Secret
		default:
			tokens[i].SecretSHA256 = *e.SecretSHA256
			if tokens[i].SecretSHA256 == "" {
				return nil, &TokenError{Path: path, Line: lines[i], Field: fmt.Sprintf("tokens[%d].secret_sha256", i), Problem: "empty: want the secret's SHA-256 as 64 hex digits"}
			}
		}
	}
	return newTokens(tokens, path, lines)
}

// lineAt is the 1-based line of byte offset off in data.
func lineAt(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return 1 + bytes.Count(data[:off], []byte("\n"))
}

// skipSpace is how many bytes of whitespace (and the comma between list
// entries) follow off: a decoder's offset before an entry points there.
func skipSpace(data []byte, off int64) int64 {
	n := int64(0)
	for off+n < int64(len(data)) && strings.IndexByte(" \t\r\n,", data[off+n]) >= 0 {
		n++
	}
	return n
}

// rightOn is c's right on key: the rule with the longest prefix of key.
func (c *caller) rightOn(key string) right {
	for _, r := range c.rules {
		if strings.HasPrefix(key, r.prefix) {
			return r.right
		}
	}
	return rightDeny
}

// governing is the rule that decides for key, for messages.
func (c *caller) governing(key string) (rule, bool) {
	for _, r := range c.rules {
		if strings.HasPrefix(key, r.prefix) {
			return r, true
		}
	}
	return rule{}, false
}

// readsUnder says how much of the keys under prefix c may read: all of
// them, none, or some (then each key must be checked).
func (c *caller) readsUnder(prefix string) (all, none bool) {
	base := c.rightOn(prefix) >= rightRead
	all, none = base, !base
	for _, r := range c.rules {
		// Only rules for longer prefixes that extend prefix decide for
		// some keys under it, differently from prefix's own rule.
		if len(r.prefix) <= len(prefix) || !strings.HasPrefix(r.prefix, prefix) {
			continue
		}
		if r.right >= rightRead {
			none = false
		} else {
			all = false
		}
	}
	return all, none
}

// apiRules is c's rules in their wire form.
func (c *caller) apiRules() []api.TokenRule {
	out := make([]api.TokenRule, len(c.rules))
	for i, r := range c.rules {
		out[i] = api.TokenRule{Prefix: r.prefix, Right: r.right.String()}
	}
	return out
}

// anonymous is everyone, on a node that requires no token.
var anonymous = &caller{name: AnonymousTokenName, rules: []rule{{prefix: "", right: rightAdmin}}}

// authenticator is the token check in force: the shared token and the
// named ones. Handler swaps it whole on SetTokens.
type authenticator struct {
	on      bool
	callers []*caller // the shared one first
}

func newAuthenticator(shared string, named *Tokens) (*authenticator, error) {
	a := &authenticator{}
	if shared != "" {
		a.callers = append(a.callers, &caller{name: SharedTokenName, hash: sha256.Sum256([]byte(shared)), rules: []rule{{prefix: "", right: rightAdmin}}})
	}
	if named != nil {
		for i, c := range named.list {
			if shared != "" && subtle.ConstantTimeCompare(c.hash[:], a.callers[0].hash[:]) == 1 {
				return nil, &TokenError{Field: fmt.Sprintf("tokens[%d].secret", i),
					Problem: fmt.Sprintf("token %q has the same secret as the shared token (-http-token): give it its own", c.name)}
			}
			a.callers = append(a.callers, c)
		}
	}
	// An empty set of named tokens still turns the check on: a file that
	// names nobody admits nobody (but the shared token).
	a.on = shared != "" || named != nil
	return a, nil
}

// authenticate finds the caller r presents. Every known secret's digest is
// compared with each presented one's, in constant time and without stopping
// at a match, so that timing tells neither a secret, its length, nor which
// token matched. With no tokens configured everyone is anonymous.
func (a *authenticator) authenticate(r *http.Request) (*caller, *apiError) {
	if !a.on {
		return anonymous, nil
	}
	presented := false
	var found *caller
	compare := func(token string) {
		presented = true
		h := sha256.Sum256([]byte(token))
		for _, c := range a.callers {
			if subtle.ConstantTimeCompare(h[:], c.hash[:]) == 1 && found == nil {
				found = c
			}
		}
	}
	for _, v := range r.Header.Values("Authorization") {
		// RFC 6750: the scheme is case-insensitive, then one or more spaces.
		scheme, token, ok := strings.Cut(v, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			compare(strings.TrimLeft(token, " "))
		}
	}
	for _, v := range r.Header.Values(api.TokenHeader) {
		compare(v)
	}
	switch {
	case found != nil:
		return found, nil
	case !presented:
		return nil, newAPIError(http.StatusUnauthorized, api.CodeUnauthorized,
			"api: this node requires a token: send \"Authorization: Bearer TOKEN\" or %q", api.TokenHeader+": TOKEN")
	default:
		return nil, newAPIError(http.StatusUnauthorized, api.CodeUnauthorized, "api: wrong token (the node knows no token with this secret)")
	}
}

// denied is the 403 for c lacking want on key (a key, or the prefix a
// listing or leave is about); what says what c tried, for the message.
func denied(c *caller, want right, what, key string) *apiError {
	has := "no rule matches it"
	if r, ok := c.governing(key); ok {
		has = fmt.Sprintf("its rule for it is %s on %q", r.right, r.prefix)
	}
	return newAPIError(http.StatusForbidden, api.CodePermissionDenied,
		"api: token %q may not %s: that needs the %s right on %q, and %s", c.name, what, want, key, has)
}
