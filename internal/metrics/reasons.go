package metrics

import "strings"

// Verdict is the verdict label of an egress decision.
func Verdict(allowed, ask bool) string {
	switch {
	case allowed:
		return "allowed"
	case ask:
		return "ask"
	default:
		return "blocked"
	}
}

// ReasonClass maps an egress decision's rule and free-text reason (policy, proxy, DNS,
// HTTP rules, git gate) to one of a fixed set of classes, so that the reason label stays
// bounded whatever names and rules sandboxes use. The first matching row wins.
func ReasonClass(rule, reason string) string {
	r := strings.ToLower(reason)
	for _, c := range reasonClasses {
		if c.rule != "" && strings.HasPrefix(rule, c.rule) {
			return c.class
		}
		if c.reason != "" && strings.Contains(r, c.reason) {
			return c.class
		}
	}
	if rule == "" && reason == "" {
		return "none"
	}
	return "other"
}

// reasonClasses are matched in order: a rule prefix or a substring of the lower-cased
// reason. Read-only.
var reasonClasses = []struct{ rule, reason, class string }{
	{reason: "held for approval", class: "ask"},
	{reason: "answered", class: "ask"},
	{rule: "user ", class: "user_rule"},
	{rule: "net deny-all", class: "deny_all"},
	{rule: "net allow-all", class: "allow_all"},
	{rule: "invalid", class: "git_invalid"},
	{reason: "denied by rule", class: "deny_rule"},
	{reason: "no http rule", class: "http_rule"},
	{reason: "http rule", class: "http_rule"},
	{reason: "matches allow rule", class: "allow_rule"},
	{reason: "allowed by rule", class: "allow_rule"},
	{reason: "no allow rule", class: "no_rule"},
	{reason: "default deny", class: "no_rule"},
	{reason: "no policy", class: "no_rule"},
	{reason: "direct ip", class: "direct_ip"},
	{reason: "ip literal", class: "direct_ip"},
	{reason: "private", class: "private_address"},
	{reason: "metadata", class: "private_address"},
	{reason: "reserved", class: "private_address"},
	{reason: "loopback", class: "private_address"},
	{reason: "invalid", class: "invalid"},
	{reason: "neither a host name", class: "invalid"},
	{reason: "reverse lookup", class: "reverse_lookup"},
	{reason: "limit", class: "limit"},
	{reason: "too many", class: "limit"},
}
