// Fixed-rate HTTP load (wrk2's model, standard library only): a latency is counted from the moment a request
// was *scheduled* to be sent, not from when it was sent, so time spent waiting for a busy server (a queue,
// a slow connection) is in the figures: coordinated-omission free.
//
// Each of -c keep-alive connections owns an even share of the schedule: connection k sends request n at
// start + (k + n*c) / rate. When a response comes back late, the next request goes out at once, and its
// latency still counts from its scheduled time.
//
// Claims use the same shopper mix as bench/claim_mix.lua: the next fresh shopper of the token file, or,
// with probability -repeat, a shopper this connection has already sent (share measured and reported).
//
//	loadgen -addr 127.0.0.1:8000 -path /api/v1/campaigns/7/claim -rate 14000 -d 10s -c 100 -tokens FILE -repeat 0.15
//	loadgen -addr 127.0.0.1:8000 -method GET -path /healthz -rate 20000 -d 10s -c 100
//
// It prints one JSON object: rates, status counts, errors and latency percentiles (from the scheduled time,
// and from the actual send for comparison) in milliseconds.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

type shopper struct{ user, token string }

type connResult struct {
	fromSchedule []int64 // microseconds
	fromSend     []int64
	status       map[int]int
	errors       int
	sent         int
	repeats      int
	lateStarts   int // requests sent more than 1 ms after their scheduled time
}

func readTokens(path string, limit int) ([]shopper, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []shopper
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() && (limit <= 0 || len(out) < limit) {
		parts := strings.Fields(sc.Text())
		if len(parts) == 2 {
			out = append(out, shopper{parts[0], parts[1]})
		}
	}
	return out, sc.Err()
}

// readResponse reads one HTTP/1.1 response and returns its status (no allocations on the common path).
func readResponse(r *bufio.Reader) (int, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status := int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	length, chunked, closing := -1, false, false
	for {
		h, err := r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		colon := bytes.IndexByte(h, ':')
		if colon < 0 {
			continue
		}
		name, value := h[:colon], bytes.TrimSpace(h[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("content-length")):
			length = 0
			for _, c := range value {
				length = length*10 + int(c-'0')
			}
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
		case bytes.EqualFold(name, []byte("connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		}
	}
	switch {
	case chunked:
		for {
			sizeLine, err := r.ReadString('\n')
			if err != nil {
				return 0, err
			}
			size, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(sizeLine, ";", 2)[0]), 16, 64)
			if err != nil {
				return 0, err
			}
			if _, err := r.Discard(int(size) + 2); err != nil {
				return 0, err
			}
			if size == 0 {
				break
			}
		}
	case length >= 0:
		if _, err := r.Discard(length); err != nil {
			return 0, err
		}
	default:
		return 0, errors.New("response without Content-Length")
	}
	if closing {
		return status, io.EOF
	}
	return status, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8000", "host:port")
	method := flag.String("method", "POST", "POST (claims, with shoppers) or GET")
	path := flag.String("path", "/healthz", "request path")
	rate := flag.Float64("rate", 1000, "requests per second, over all connections")
	duration := flag.Duration("d", 10*time.Second, "how long to send")
	conns := flag.Int("c", 100, "keep-alive connections")
	tokens := flag.String("tokens", "", "token file (one 'user token' pair a line) for POST claims")
	offset := flag.Int("offset", 0, "skip this many shoppers of the token file (a fresh range per run)")
	repeat := flag.Float64("repeat", 0.15, "probability that a claim comes from a shopper already seen")
	seed := flag.Int64("seed", 1, "random seed")
	flag.Parse()

	var shoppers []shopper
	if *tokens != "" {
		all, err := readTokens(*tokens, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "tokens:", err)
			os.Exit(1)
		}
		if *offset >= len(all) {
			fmt.Fprintln(os.Stderr, "offset beyond the token file")
			os.Exit(1)
		}
		shoppers = all[*offset:]
	}
	head := *method + " " + *path + " HTTP/1.1\r\nHost: " + *addr + "\r\n"
	interval := time.Duration(float64(time.Second) * float64(*conns) / *rate) // per connection
	start := time.Now().Add(200 * time.Millisecond)                           // every connection dialled by then
	end := start.Add(*duration)
	results := make([]*connResult, *conns)
	var wg sync.WaitGroup
	for k := 0; k < *conns; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			res := &connResult{status: map[int]int{}}
			results[k] = res
			rng := rand.New(rand.NewSource(*seed + int64(k)))
			var seen []int
			next := k // this connection's fresh shoppers: k, k+c, k+2c, ...
			var conn net.Conn
			var rd *bufio.Reader
			dial := func() error {
				if conn != nil {
					conn.Close()
				}
				c, err := net.DialTimeout("tcp", *addr, 5*time.Second)
				if err != nil {
					conn = nil
					return err
				}
				conn, rd = c, bufio.NewReaderSize(c, 16384)
				return nil
			}
			if err := dial(); err != nil {
				res.errors++
			}
			first := start.Add(time.Duration(float64(interval) * float64(k) / float64(*conns)))
			buf := make([]byte, 0, 512)
			for n := 0; ; n++ {
				scheduled := first.Add(time.Duration(n) * interval)
				if !scheduled.Before(end) {
					break
				}
				if d := time.Until(scheduled); d > 20*time.Microsecond {
					time.Sleep(d)
				}
				buf = buf[:0]
				if shoppers != nil {
					var i int
					if len(seen) > 0 && rng.Float64() < *repeat {
						i = seen[rng.Intn(len(seen))]
						res.repeats++
					} else {
						i = next % len(shoppers)
						next += *conns
						seen = append(seen, i)
					}
					buf = append(buf, head...)
					buf = append(buf, "X-User-Id: "...)
					buf = append(buf, shoppers[i].user...)
					buf = append(buf, "\r\nX-Token: "...)
					buf = append(buf, shoppers[i].token...)
					buf = append(buf, "\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"...)
				} else {
					buf = append(buf, head...)
					buf = append(buf, "\r\n"...)
				}
				sent := time.Now()
				if sent.Sub(scheduled) > time.Millisecond {
					res.lateStarts++
				}
				res.sent++
				if conn == nil {
					if err := dial(); err != nil {
						res.errors++
						continue
					}
				}
				_ = conn.SetDeadline(sent.Add(10 * time.Second))
				status := 0
				_, err := conn.Write(buf)
				if err == nil {
					status, err = readResponse(rd)
				}
				done := time.Now()
				if err != nil && status == 0 {
					res.errors++
					_ = dial()
					continue
				}
				if err != nil { // answered, then closed
					_ = dial()
				}
				res.status[status]++
				res.fromSchedule = append(res.fromSchedule, done.Sub(scheduled).Microseconds())
				res.fromSend = append(res.fromSend, done.Sub(sent).Microseconds())
			}
			if conn != nil {
				conn.Close()
			}
		}(k)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()

	var fromSchedule, fromSend []int64
	status := map[string]int{}
	sent, errs, repeats, late := 0, 0, 0, 0
	for _, r := range results {
		fromSchedule = append(fromSchedule, r.fromSchedule...)
		fromSend = append(fromSend, r.fromSend...)
		for s, n := range r.status {
			status[strconv.Itoa(s)] += n
		}
		sent += r.sent
		errs += r.errors
		repeats += r.repeats
		late += r.lateStarts
	}
	pct := func(xs []int64) map[string]float64 {
		out := map[string]float64{}
		if len(xs) == 0 {
			return out
		}
		sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
		for _, p := range []struct {
			name string
			q    float64
		}{{"p50_ms", 0.50}, {"p90_ms", 0.90}, {"p99_ms", 0.99}, {"p999_ms", 0.999}, {"max_ms", 1.0}} {
			i := int(math.Ceil(p.q*float64(len(xs)))) - 1
			if i < 0 {
				i = 0
			}
			out[p.name] = float64(xs[i]) / 1000
		}
		var sum int64
		for _, x := range xs {
			sum += x
		}
		out["mean_ms"] = float64(sum) / float64(len(xs)) / 1000
		return out
	}
	completed := len(fromSchedule)
	report := map[string]any{
		"target_rate":         *rate,
		"connections":         *conns,
		"duration_s":          duration.Seconds(),
		"sent":                sent,
		"completed":           completed,
		"achieved_rate":       float64(completed) / elapsed,
		"errors":              errs,
		"status":              status,
		"repeat_probability":  *repeat,
		"repeated_share":      ratio(repeats, sent),
		"late_start_share":    ratio(late, sent),
		"latency_from_intent": pct(fromSchedule),
		"latency_from_send":   pct(fromSend),
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(report)
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
