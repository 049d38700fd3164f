module github.com/httpcrypt/httpcrypt/clients/go

go 1.26.0

require (
	filippo.io/edwards25519 v1.2.0
	golang.org/x/crypto v0.59.0
)

require golang.org/x/sys v0.50.0 // indirect
