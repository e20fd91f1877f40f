package httpcap

import "net/netip"

// Class says why an address is special: a handler reaches it only through an allow entry
// that names the address itself. The empty Class is an ordinary public address.
type Class string

// Classes of special addresses.
const (
	Public        Class = ""
	Loopback      Class = "loopback"
	Private       Class = "private"
	LinkLocal     Class = "link-local"
	CloudMetadata Class = "cloud metadata"
	Unspecified   Class = "unspecified"
	Multicast     Class = "multicast"
	SharedNAT     Class = "shared (carrier-grade NAT)"
	Documentation Class = "documentation"
	Reserved      Class = "reserved"
)

// metadata are the instance-metadata endpoints of the large clouds. Most already fall in a
// special range; they are listed so messages say what they are.
var metadata = map[netip.Addr]bool{
	netip.MustParseAddr("169.254.169.254"): true, // AWS, GCP, Azure, OpenStack, DigitalOcean...
	netip.MustParseAddr("169.254.170.2"):   true, // AWS ECS task metadata
	netip.MustParseAddr("169.254.169.253"): true, // AWS DNS resolver
	netip.MustParseAddr("100.100.100.200"): true, // Alibaba Cloud
	netip.MustParseAddr("192.0.0.192"):     true, // Oracle Cloud
	netip.MustParseAddr("fd00:ec2::254"):   true, // AWS (IPv6)
	netip.MustParseAddr("fd00:ec2::23"):    true, // AWS time sync (IPv6)
}

type classRange struct {
	prefix netip.Prefix
	class  Class
}

// ipv4Special lists the IPv4 ranges that are not ordinary public unicast (IANA's special
// purpose registry, most specific first where they overlap).
var ipv4Special = ranges(
	"0.0.0.0/8", Unspecified,
	"10.0.0.0/8", Private,
	"100.64.0.0/10", SharedNAT,
	"127.0.0.0/8", Loopback,
	"169.254.0.0/16", LinkLocal,
	"172.16.0.0/12", Private,
	"192.0.0.0/24", Reserved,
	"192.0.2.0/24", Documentation,
	"192.88.99.0/24", Reserved,
	"192.168.0.0/16", Private,
	"198.18.0.0/15", Reserved,
	"198.51.100.0/24", Documentation,
	"203.0.113.0/24", Documentation,
	"224.0.0.0/4", Multicast,
	"240.0.0.0/4", Reserved, // includes the broadcast address 255.255.255.255
)

// ipv6Special lists the IPv6 ranges checked before the global unicast rule. Addresses
// that carry an IPv4 address (mapped, NAT64, 6to4) are classified by it instead.
var ipv6Special = ranges(
	"::/128", Unspecified,
	"::1/128", Loopback,
	"fc00::/7", Private, // unique local
	"fe80::/10", LinkLocal,
	"fec0::/10", Private, // site-local (deprecated)
	"ff00::/8", Multicast,
	"2001:db8::/32", Documentation,
	"3fff::/20", Documentation,
	"2001::/23", Reserved, // IETF protocol assignments: Teredo, benchmarking, ORCHID
)

var (
	globalUnicast6 = netip.MustParsePrefix("2000::/3")
	nat64          = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour      = netip.MustParsePrefix("2002::/16")
)

func ranges(pairs ...any) []classRange {
	out := make([]classRange, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, classRange{netip.MustParsePrefix(pairs[i].(string)), pairs[i+1].(Class)})
	}
	return out
}

// Classify returns the Class of a: Public for an ordinary public unicast address.
// IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) count as the IPv4 address they carry, and
// so do NAT64 (64:ff9b::/96) and 6to4 (2002::/16) addresses: each reaches that address.
func Classify(a netip.Addr) Class {
	a = a.Unmap().WithZone("")
	if metadata[a] {
		return CloudMetadata
	}
	if a.Is4() {
		return lookup(ipv4Special, a)
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return Classify(netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFour.Contains(a):
		return Classify(netip.AddrFrom4([4]byte(b[2:6])))
	}
	if c := lookup(ipv6Special, a); c != Public {
		return c
	}
	if !globalUnicast6.Contains(a) {
		// Everything else outside 2000::/3 is unassigned, deprecated (IPv4-compatible
		// ::a.b.c.d) or for local use (64:ff9b:1::/48, 100::/64).
		return Reserved
	}
	return Public
}

func lookup(table []classRange, a netip.Addr) Class {
	for _, r := range table {
		if r.prefix.Contains(a) {
			return r.class
		}
	}
	return Public
}
