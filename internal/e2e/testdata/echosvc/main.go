// echosvc is the service the end-to-end tests run from an artifact: it
// listens on $PORT and answers every request with its coordinate, pid and
// the arguments it got (and, in an ensemble, where its database tier
// answers), and logs each request on stdout.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(2)
	}
	fmt.Println("echosvc listening on", ln.Addr(), "args", strings.Join(os.Args[1:], " "))
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		<-sig
		fmt.Println("echosvc stopping on SIGTERM")
		os.Exit(0)
	}()
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("echosvc request", r.URL.Path)
		fmt.Fprintf(w, "coordinate=%s pid=%d args=%s runtime=%s", os.Getenv("NODEMGR_COORDINATE"), os.Getpid(),
			strings.Join(os.Args[1:], " "), os.Getenv("NODEMGR_RUNTIME_DIR"))
		if db := os.Getenv("NODEMGR_ALLOC_DB_ADDR"); db != "" { // an ensemble's tier below
			fmt.Fprintf(w, " db=%s", db)
		}
		fmt.Fprintln(w)
	}))
}
