// The cluster DNS of the real node: CoreDNS with only the plugins its Corefile
// (generator/controlplane/realnode/dns.py) uses. CoreDNS's own main links every plugin,
// the cloud providers' SDKs among them, which triples the first build on a 2-core machine;
// a plugin registers itself when imported, and the server orders them by its own list.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
