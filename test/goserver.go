// An HTTP server and 8 client goroutines in one Go program, on a loopback port of its own: each
// client makes N requests (the argument), the handler answers each with greet's text. It counts
// its own calls of main.handler and main.greet and prints them with main.client's (see
// README.md), for a full trace of a program whose goroutines block in the network poller, move
// between threads and grow their stacks under the runtime's scheduler. On stderr, the id Go gives
// the goroutine of main and of each client ("goroutine 7 main.client").
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

var handled, greeted int64

//go:noinline
func greet(name string) string {
	atomic.AddInt64(&greeted, 1)
	return "hello " + name
}

func handler(w http.ResponseWriter, r *http.Request) {
	atomic.AddInt64(&handled, 1)
	io.WriteString(w, greet(r.URL.Query().Get("n")))
}

// Says on stderr which goroutine runs `function`: its id, from the first line of its stack trace
// ("goroutine 7 [running]:").
func sayGoroutine(function string) {
	trace := make([]byte, 64)
	trace = trace[:runtime.Stack(trace, false)]
	fmt.Fprintf(os.Stderr, "goroutine %s %s\n", strings.Fields(string(trace))[1], function)
}

//go:noinline
func client(base string, requests int, wg *sync.WaitGroup) {
	defer wg.Done()
	sayGoroutine("main.client")
	for i := 0; i < requests; i++ {
		response, err := http.Get(base + "/?n=" + strconv.Itoa(i))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		io.Copy(io.Discard, response.Body)
		response.Body.Close()
	}
}

func main() {
	sayGoroutine("main.main")
	requests, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "usage: goserver REQUESTS_PER_CLIENT")
		os.Exit(2)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.HandleFunc("/", handler)
	go http.Serve(listener, nil)
	var wg sync.WaitGroup
	const clients = 8
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go client("http://"+listener.Addr().String(), requests, &wg)
	}
	wg.Wait()
	fmt.Printf("calls %d main.handler\ncalls %d main.greet\ncalls %d main.client\n",
		atomic.LoadInt64(&handled), atomic.LoadInt64(&greeted), clients)
}
