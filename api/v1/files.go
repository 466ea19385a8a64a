package v1

// TarResult is the answer of POST /v1/sandboxes/{id}/envd/moat/tar: what the sandbox's
// moat-init extracted.
type TarResult struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"` // regular files' content
}

// Trailers of GET /v1/sandboxes/{id}/envd/moat/tar. The stream is complete only when
// TarStatusTrailer is "ok"; otherwise it holds the error that cut it short.
const (
	TarStatusTrailer  = "X-Moat-Tar-Status"
	TarSkippedTrailer = "X-Moat-Tar-Skipped" // how many devices, FIFOs and sockets were left out
)
