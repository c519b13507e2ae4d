// Command etcd runs a single-member etcd on loopback through etcd's embed
// package: the storage the local kube-apiserver needs and nothing more. With
// --cert-file, --key-file and --trusted-ca-file both listeners serve TLS and
// answer only clients whose certificate the CA signed.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "folder for etcd's data (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "URL clients connect to")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "URL of the (single) peer listener")
	certFile := flag.String("cert-file", "", "serving certificate (PEM); with --key-file and --trusted-ca-file, TLS")
	keyFile := flag.String("key-file", "", "the serving certificate's key (PEM)")
	caFile := flag.String("trusted-ca-file", "", "CA whose client certificates alone are answered")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("--data-dir is required")
	}
	client, err := url.Parse(*clientURL)
	if err != nil {
		log.Fatalf("--listen-client-url: %v", err)
	}
	peer, err := url.Parse(*peerURL)
	if err != nil {
		log.Fatalf("--listen-peer-url: %v", err)
	}

	cfg := embed.NewConfig()
	cfg.Name = "local"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "warn"
	if *certFile != "" || *keyFile != "" || *caFile != "" {
		if *certFile == "" || *keyFile == "" || *caFile == "" {
			log.Fatal("--cert-file, --key-file and --trusted-ca-file go together")
		}
		// Peers too: a single member has none, but its peer port must not take raft messages from anyone.
		tls := transport.TLSInfo{CertFile: *certFile, KeyFile: *keyFile, TrustedCAFile: *caFile, ClientCertAuth: true}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = tls, tls
	}
	// A developer cluster: keep the data small and the disk quiet.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"
	cfg.UnsafeNoFsync = true

	server, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("starting etcd: %v", err)
	}
	defer server.Close()
	<-server.Server.ReadyNotify()
	log.Printf("etcd ready on %s", client)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-stop:
	case err := <-server.Err():
		log.Fatalf("etcd failed: %v", err)
	}
}
