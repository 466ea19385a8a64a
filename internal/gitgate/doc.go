// Package gitgate is the protocol half of moat's git gate: it reads what a sandbox's git
// client sends to git-receive-pack over smart HTTP and decides, with no I/O and no git, which
// ref updates moat lets through. The egress interceptor (which terminates TLS toward git
// hosts the sandbox holds a credential binding for) feeds it the request body; the objects
// themselves are checked later, in a quarantine repository, by the caller, which hands the
// results back to this package's pure functions as inputs (fast-forward answers, touched
// paths).
//
// The pieces, in the order a push meets them:
//
//   - [Classify]: which git service an HTTP request to a git host asks for; every spelling
//     of a push is a push or an error.
//   - [FilterAdvertisement]: the host's receive-pack advertisement without the capabilities
//     moat refuses (push-cert, push-options), so git refuses --signed and -o itself.
//   - [DecodeBody]: the request body without its gzip Content-Encoding, bounded.
//   - [PktReader] and [PktWriter]: git's pkt-line framing, strictly (4 hex digits, flush
//     0000, delim 0001, response-end 0002, at most 65520 bytes a line); a reader never holds
//     more than one line.
//   - [ParseReceivePack]: the update request (shallow lines, the command list or a push
//     certificate, push options) into a [Request], with a reader left at the first byte of
//     the pack. Object ids are SHA-1 or SHA-256 as the object-format capability says, the
//     same for the whole request; ref names pass [CheckRefName].
//   - [Policy.Decide]: per command, allow or refuse with a reason: only creations and
//     updates under the sandbox's agent prefix, no deletions, no tags or other refs, no
//     forced updates unless the policy allows them, no push options or certificates. A push
//     is all or nothing: one refused command refuses all.
//   - [PathMatcher]: protected path globs (CI definitions, CODEOWNERS, moat's own files and
//     the operator's list) against the paths a push touches.
//   - [WriteReport]: the report-status (or report-status-v2) answer, framed in side-band-64k
//     when the client asked for it, so that git push prints moat's reason as
//     "remote: moat: ..." and "[remote rejected]" and exits non-zero.
//
// Every error about the bytes or values given is wrapped around errdefs.ErrInvalidArgument.
package gitgate
