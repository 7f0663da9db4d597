// A Go program that counts its own calls (see README.md): recursion (fib), goroutines on several
// threads that yield and so move between threads (worker, step), and a call chain deep enough to
// make the runtime grow, and so copy, the goroutine's stack several times (deep). Under tracing
// its output and exit code must stay as they are, and utrace's counts must equal its own.
//
// With the argument `wait`, it prints `ready` and waits for SIGUSR1 before it starts (for
// `utrace record -p`). It exits with code 3.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
)

var fibCalls, workerCalls, stepCalls, deepCalls, sumCalls uint64

//go:noinline
func fib(n int) int {
	atomic.AddUint64(&fibCalls, 1)
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2)
}

//go:noinline
func step(i int) int {
	atomic.AddUint64(&stepCalls, 1)
	if i%64 == 0 {
		// Lets the scheduler run another goroutine here, and this one later, maybe elsewhere.
		runtime.Gosched()
	}
	return i * 7 % 13
}

//go:noinline
func worker(id int, wg *sync.WaitGroup, out []int) {
	defer wg.Done()
	atomic.AddUint64(&workerCalls, 1)
	total := 0
	for i := 0; i < 20000; i++ {
		total += step(i + id)
	}
	out[id] = total + fib(12)
}

// Each frame holds 256 bytes: 4000 of them need about 1.5 MB of stack, which starts at 8 kB.
//
//go:noinline
func deep(n int) int {
	atomic.AddUint64(&deepCalls, 1)
	var pad [32]int
	pad[n%32] = n
	if n == 0 {
		return pad[0]
	}
	return deep(n-1) + pad[n%32]%3
}

//go:noinline
func sum(values []int) int {
	atomic.AddUint64(&sumCalls, 1)
	total := 0
	for _, v := range values {
		total += v
	}
	return total
}

func main() {
	runtime.GOMAXPROCS(4)
	if len(os.Args) > 1 && os.Args[1] == "wait" {
		started := make(chan os.Signal, 1)
		signal.Notify(started, syscall.SIGUSR1)
		fmt.Println("ready")
		<-started
	}
	fmt.Println("fib", fib(20))
	var wg sync.WaitGroup
	out := make([]int, 8)
	for id := range out {
		wg.Add(1)
		go worker(id, &wg, out)
	}
	wg.Wait()
	fmt.Println("workers", sum(out))
	results := make(chan int)
	for i := 0; i < 4; i++ {
		go func(i int) { results <- deep(4000 + i) }(i)
	}
	total := 0
	for i := 0; i < 4; i++ {
		total += <-results
	}
	fmt.Println("deep", total)
	fmt.Printf("calls %d main.fib\n", atomic.LoadUint64(&fibCalls))
	fmt.Printf("calls %d main.worker\n", atomic.LoadUint64(&workerCalls))
	fmt.Printf("calls %d main.step\n", atomic.LoadUint64(&stepCalls))
	fmt.Printf("calls %d main.deep\n", atomic.LoadUint64(&deepCalls))
	fmt.Printf("calls %d main.sum\n", atomic.LoadUint64(&sumCalls))
	os.Exit(3)
}
