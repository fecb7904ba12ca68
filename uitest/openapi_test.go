package uitest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/raftlock/raftlock/apiserver"
	"github.com/raftlock/raftlock/lock/memstore"
)

// TestOpenAPIDocumentIsValid checks /v1/openapi.json with an OpenAPI 3
// validator (kin-openapi, a dependency of this test module only).
func TestOpenAPIDocumentIsValid(t *testing.T) {
	srv := httptest.NewServer(apiserver.NewHandler(memstore.New(), apiserver.Config{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(body)
	if err != nil {
		t.Fatalf("/v1/openapi.json does not load as OpenAPI: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("/v1/openapi.json is not valid OpenAPI 3: %v", err)
	}
	if len(doc.Paths.Map()) < 10 {
		t.Errorf("only %d paths described", len(doc.Paths.Map()))
	}
}
