package v1

// AuditRecord is one record of the daemon's tamper-evident audit log (GET /v1/audit;
// moat audit). Hash is SHA-256 over the record's canonical encoding, which includes Prev,
// the hash of the record before it.
type AuditRecord struct {
	Seq     int64  `json:"seq"`
	Time    string `json:"time"`
	Sandbox string `json:"sandbox,omitempty"`
	Actor   string `json:"actor"` // "operator", "key:<id>" or "daemon"
	Kind    string `json:"kind"`
	Detail  string `json:"detail,omitempty"`
	Prev    string `json:"prev"`
	Hash    string `json:"hash"`
}

// AuditProblem is one failure found by GET /v1/audit/verify, at record Seq. Kind is
// "edited", "reordered", "missing", "chain", "checkpoint" or "anchor".
type AuditProblem struct {
	Seq     int64  `json:"seq"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// AuditVerification is the answer of GET /v1/audit/verify (moat audit verify).
type AuditVerification struct {
	OK          bool           `json:"ok"`
	Records     int            `json:"records"`
	First       int64          `json:"first,omitempty"`
	Last        int64          `json:"last,omitempty"`
	Checkpoints int            `json:"checkpoints"`
	PublicKey   string         `json:"public_key"` // hex ed25519 key the checkpoints are checked with
	Problems    []AuditProblem `json:"problems,omitempty"`
}
