package compute

import "golang.org/x/net/idna"

// whatwgIDNA is UTS #46 as the URL standard's domain to ASCII runs it when not strict: no
// STD3 rules, no hyphen or DNS length checks, nontransitional, joiners and bidi checked.
var whatwgIDNA = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.CheckHyphens(false),
	idna.CheckJoiners(true),
	idna.BidiRule(),
	idna.StrictDomainName(false),
	idna.VerifyDNSLength(false),
)

// idnaToASCII answers {"domain": the ASCII form} or {"error": true} when the name fails.
func idnaToASCII(domain string) (any, error) {
	out, err := whatwgIDNA.ToASCII(domain)
	if err != nil {
		return map[string]bool{"error": true}, nil
	}
	return map[string]string{"domain": out}, nil
}
