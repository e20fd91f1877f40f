//go:build !wasip1

package pgflow

// Outside a pgflow-wasm host (native builds: tests, tools) every capability is denied.

func hostHTTPRequest(method, url, header string, body []byte) int32 { return ErrDenied }
func hostResponsePart(part int32) []byte                            { return nil }
func hostConfigGet(name string) ([]byte, int32)                     { return nil, ErrDenied }
func hostLastError() string                                         { return notHosted }
