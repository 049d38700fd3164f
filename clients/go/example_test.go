package httpcrypt_test

import (
	"fmt"
	"io"
	"net/http"

	httpcrypt "github.com/httpcrypt/httpcrypt/clients/go"
)

// An http.Client whose requests travel over HTTPCrypt: the first request
// fetches the server's certificates (OPTIONS /hc/), then every request is
// sealed, and only verified response bytes reach the caller.
func Example() {
	client := &http.Client{Transport: httpcrypt.NewTransport(httpcrypt.Options{
		Mount:    "/hc",
		Identity: "cHhK5jG2KQItzu9kUJnBAKomcQ9aQhmUghaM44J8_us", // optional pin: authenticated mode
	})}
	rsp, err := client.Get("http://127.0.0.1:8080/index.html")
	if err != nil {
		fmt.Println("error:", httpcrypt.CodeOf(err)) // e.g. bad_signature, integrity, refused
		return
	}
	defer rsp.Body.Close()
	body, err := io.ReadAll(rsp.Body) // an integrity failure mid-stream is an error here, never data
	fmt.Println(rsp.StatusCode, len(body), err)
}
