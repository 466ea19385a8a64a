package egress

// Observer is told of every egress decision and credential injection (internal/metrics
// implements it; nil in Config: none). It sees classes, never names, addresses or
// secrets; it is called on the connection's path, so it must not block.
type Observer interface {
	// ProxyConn: a TCP connection the proxy decided.
	ProxyConn(allowed, ask bool, rule, reason string)
	// EgressDecision: an HTTP-rule ("http") or git-gate ("git") decision.
	EgressDecision(proto string, allowed bool, rule, reason string)
	// DNSQuery: a query a sandbox's resolver answered (every one, not only the first of
	// a name that the egress log keeps).
	DNSQuery(allowed bool)
	// CredentialInjected: a credential was injected into a request.
	CredentialInjected()
}

// observe reports an egress log entry to the observer as it is recorded.
func (j *journal) observe(e *Entry) {
	if j.obs == nil {
		return
	}
	switch e.Proto {
	case "tcp":
		j.obs.ProxyConn(e.Allowed, false, e.Rule, e.Reason)
	case "http", "git":
		j.obs.EgressDecision(e.Proto, e.Allowed, e.Rule, e.Reason)
	}
}
