package inventory

import (
	"strings"

	"golang.org/x/net/publicsuffix"
)

// SharedDomain is a domain under which many unrelated parties get names (buckets, pages,
// apps, functions): a rule over it reaches every tenant, an attacker's among them.
type SharedDomain struct {
	Suffix string
	What   string
	// PathTenants: the bare name also serves every tenant, by path (path-style bucket
	// URLs, raw files of any repository), so even a rule naming it exactly is wide.
	PathTenants bool
}

// SharedDomains is moat's table of multi-tenant domains. Where it comes from: the private
// section of the Public Suffix List (publicsuffix.org, the "===BEGIN PRIVATE DOMAINS==="
// part, where hosting providers list the domains their customers get names under) for the
// hosting, pages and functions domains; the providers' documentation for storage
// endpoints that serve every bucket by path (AWS S3 path-style requests, Google Cloud
// Storage's storage.googleapis.com/BUCKET, raw.githubusercontent.com/OWNER/REPO). The
// embedded copy of the whole list (golang.org/x/net/publicsuffix) is consulted too
// (isPublicSuffix), so a domain missing here but on the list is still flagged. A fresh
// slice each call.
func SharedDomains() []SharedDomain {
	return []SharedDomain{
		{Suffix: "s3.amazonaws.com", What: "AWS S3 buckets", PathTenants: true},
		{Suffix: "amazonaws.com", What: "AWS endpoints (S3 buckets, API Gateway, ELB, … of every account)"},
		{Suffix: "cloudfront.net", What: "AWS CloudFront distributions"},
		{Suffix: "awsapprunner.com", What: "AWS App Runner services"},
		{Suffix: "github.io", What: "GitHub Pages sites"},
		{Suffix: "githubusercontent.com", What: "GitHub user content (raw files, gists, avatars)"},
		{Suffix: "raw.githubusercontent.com", What: "raw files of every GitHub repository", PathTenants: true},
		{Suffix: "gist.githubusercontent.com", What: "every GitHub gist", PathTenants: true},
		{Suffix: "gitlab.io", What: "GitLab Pages sites"},
		{Suffix: "herokuapp.com", What: "Heroku apps"},
		{Suffix: "vercel.app", What: "Vercel deployments"},
		{Suffix: "netlify.app", What: "Netlify sites"},
		{Suffix: "blob.core.windows.net", What: "Azure Blob Storage accounts"},
		{Suffix: "azurewebsites.net", What: "Azure App Service apps"},
		{Suffix: "web.core.windows.net", What: "Azure static websites"},
		{Suffix: "appspot.com", What: "Google App Engine apps"},
		{Suffix: "storage.googleapis.com", What: "Google Cloud Storage buckets", PathTenants: true},
		{Suffix: "cloudfunctions.net", What: "Google Cloud Functions"},
		{Suffix: "run.app", What: "Google Cloud Run services"},
		{Suffix: "web.app", What: "Firebase Hosting sites"},
		{Suffix: "firebaseapp.com", What: "Firebase apps"},
		{Suffix: "workers.dev", What: "Cloudflare Workers"},
		{Suffix: "pages.dev", What: "Cloudflare Pages sites"},
		{Suffix: "r2.dev", What: "Cloudflare R2 public buckets"},
		{Suffix: "trycloudflare.com", What: "Cloudflare quick tunnels (anyone's laptop)"},
		{Suffix: "ngrok.io", What: "ngrok tunnels (anyone's laptop)"},
		{Suffix: "ngrok-free.app", What: "ngrok tunnels (anyone's laptop)"},
		{Suffix: "fly.dev", What: "Fly.io apps"},
		{Suffix: "onrender.com", What: "Render services"},
		{Suffix: "glitch.me", What: "Glitch projects"},
		{Suffix: "replit.app", What: "Replit deployments"},
		{Suffix: "deno.dev", What: "Deno Deploy projects"},
		{Suffix: "supabase.co", What: "Supabase projects"},
		{Suffix: "digitaloceanspaces.com", What: "DigitalOcean Spaces buckets"},
	}
}

// sharedOver returns the shared domain a wildcard "*.parent" reaches tenants of: one
// equal to parent, or below it (*.amazonaws.com reaches *.s3.amazonaws.com); ok false if
// none. A wildcard below one tenant's name (*.mybucket.s3.amazonaws.com) is not flagged.
func sharedOver(parent string) (SharedDomain, bool) {
	var found SharedDomain
	for _, d := range SharedDomains() {
		if d.Suffix == parent {
			return d, true
		}
		if found.Suffix == "" && strings.HasSuffix(d.Suffix, "."+parent) {
			found = d
		}
	}
	if found.Suffix != "" {
		return found, true
	}
	if isPublicSuffix(parent) {
		return SharedDomain{Suffix: parent, What: "a public suffix (Public Suffix List)"}, true
	}
	return SharedDomain{}, false
}

// sharedExact returns the shared domain whose bare name serves every tenant by path.
func sharedExact(host string) (SharedDomain, bool) {
	for _, d := range SharedDomains() {
		if d.PathTenants && d.Suffix == host {
			return d, true
		}
	}
	return SharedDomain{}, false
}

// isPublicSuffix reports whether name is itself on the Public Suffix List (ICANN: a
// top-level or registry domain such as "com" or "co.uk"; private: a provider's shared
// domain). The list's implicit "*" rule (any unknown TLD) is not counted.
func isPublicSuffix(name string) bool {
	s, icann := publicsuffix.PublicSuffix(name)
	if s != name {
		return false
	}
	return icann || strings.Contains(s, ".")
}

// isICANNSuffix reports whether name is a top-level or registry domain ("com", "co.uk").
func isICANNSuffix(name string) bool {
	s, icann := publicsuffix.PublicSuffix(name)
	return s == name && (icann || !strings.Contains(s, "."))
}
