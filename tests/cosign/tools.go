//go:build tools

// Package tools pins cosign, which tests/cosign/run.sh builds to check that nicpolicy's
// signatures and cosign's are one format.
package tools

import _ "github.com/sigstore/cosign/v2/cmd/cosign"
