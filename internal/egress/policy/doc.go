// Package policy is the egress policy of a sandbox: which host names, ports and addresses
// a sandbox may reach through moat's proxy and DNS server. It is the security decision at
// the network boundary, so it is pure and compiled: [Compile] and [CompileSpec] parse the
// user's rules once and reject anything malformed; [Policy.Decide] then answers each
// connection or query with no I/O and, for canonical input, no allocation. A [Policy] is
// immutable and safe for concurrent use.
//
// # Rules
//
// A phase's [Rules] has a net mode and allow and deny lists of rule strings:
//
//	example.com            the name example.com, any port
//	example.com:443        one port; example.com:8000-8100 a range (ports 1-65535)
//	*.example.com          any name below example.com at any depth, never example.com itself
//	10.0.0.0/8, 192.0.2.5  an IPv4 prefix or address, optionally with :port or :range
//	registries             a named set (see below)
//
// Names are case-insensitive and may end in one dot; they must be ASCII (IDNs in their
// xn-- form). "*", URLs, paths, IPv6 and out-of-range ports are rejected. See
// [NormalizeName] for what a name is.
//
// A named set is a list of rule strings; a member with methods or a path
// ("HOST[:PORTS] METHODS [/PATH-PREFIX]", "*" for any method) is an HTTP rule, which an
// allowed set adds like an entry of the http list (a denied set denies its host). The
// built-in set "registries" ([BuiltinSets]) covers the common package registries
// read-only: GET and HEAD, on their download paths where those are known, so a sandbox can
// install packages but not publish them; "registries-publish" is the explicit opt-in to
// publishing (the same hosts and upload.pypi.org, every method). Both make the proxy
// terminate TLS to the registries with the sandbox's CA. A user set of a built-in set's
// name extends it (a plain host added to "registries" is allowed whole). An entry is a
// set reference exactly when it is (case-insensitively) the name of a set; otherwise it
// is a rule, so a misspelt set name is an ordinary host name that matches nothing
// useful. Sets cannot contain sets, and a set reference takes no port.
//
// # HTTP rules
//
// A phase's http list holds HTTP rules, which reach inside TLS:
//
//	api.github.com                          every request (inspected, so credentials can be scrubbed)
//	api.github.com GET,HEAD                 only these methods (upper case; * for any)
//	api.github.com:443 GET /repos/acme/     only GETs whose path starts with /repos/acme/
//	*.githubusercontent.com GET             wildcards as in allow rules
//
// An HTTP rule allows its host and ports as an allow rule would (deny rules still win,
// and net deny-all takes none), and makes the proxy terminate TLS to that host with the
// sandbox's CA ([Policy.Inspects]) and check every request ([Policy.DecideHTTP]): a
// request passes when one of the rules covering its host lists its method and a prefix of
// its path. The prefix is a string prefix of the escaped path: write "/repos/acme/", not
// "/repos/acme", which also matches "/repos/acme-evil". Paths that a server might resolve
// elsewhere (empty, "." or ".." segments, backslashes, encoded '/', '\' or '.') never
// match. Plain HTTP to a host with HTTP rules is read and checked the same way (in clear).
//
// # Decisions
//
// [Policy.Decide] applies the first step that answers:
//
//  1. net deny-all denies everything (and takes no allow rules).
//  2. A deny rule wins over every allow: a name deny rule matching the request's name and
//     port, or a CIDR deny rule covering the request's address (named or direct).
//  3. net allow-all allows the rest, direct IP connections included.
//  4. A named request is allowed by a name allow rule (exact or wildcard) covering its port.
//     CIDR allow rules never allow a name, whatever it resolves to.
//  5. A direct IP request (empty name) is allowed by a CIDR allow rule covering its address
//     and port.
//  6. Everything else is denied (default deny).
//
// Port 0 in a request asks "on some port?" (the DNS server's question): any allow rule for
// the name counts, and only deny rules covering every port deny. The proxy must still ask
// again with the real port.
//
// IPv4-mapped IPv6 addresses are matched as IPv4. A CIDR deny rule also covers every IPv6
// address that carries an IPv4 address it covers (NAT64, 6to4, Teredo, ...; see
// [EmbeddedIPv4]); CIDR allow rules cover only IPv4 addresses. A request name that is not
// a valid host name (for example an IP literal) is denied; pass addresses in
// [Request.Addr].
//
// [Policy.NamesAddr] answers a separate question for the proxy: does the policy name this
// (private, loopback, ...) address explicitly with a CIDR allow rule? net allow-all alone
// never does.
//
// # Phases
//
// A [Spec] holds named phases (for example "setup" with registries, then "run" with
// nothing) and the current one; [ParseFile] reads the YAML policy file. A Spec that names
// no current phase gets one from [Spec.StartPhase] where it is applied: "run" at create,
// "setup" when a setup command runs first, the sandbox's current phase (if the new policy
// has it, else "run") when a policy is replaced. Errors are of class
// errdefs.ErrInvalidArgument and name the offending phase, field or rule.
package policy
