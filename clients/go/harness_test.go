package punctual_test

// The real punctual binary on free ports, for every test of the package: PUNCTUAL_BIN, else
// target/release/punctual of this repository, built first (cargo build --release --locked).

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the punctual repository holding this module.
func repoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Join(wd, "..", "..")
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binary is the server to test: PUNCTUAL_BIN, else the repository's release build, built
// first (cargo does nothing when it is up to date).
func binary() (string, error) {
	binOnce.Do(func() {
		if p := os.Getenv("PUNCTUAL_BIN"); p != "" {
			binPath = p
			return
		}
		cmd := exec.Command("cargo", "build", "--release", "--locked", "--bin", "punctual")
		cmd.Dir = repoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("cargo build --release: %v\n%s", err, out)
			return
		}
		binPath = filepath.Join(repoRoot(), "target", "release", "punctual")
	})
	return binPath, binErr
}

// claims holds the abstract sockets that claim the ports given out, for as long as the
// process lives: the repository's Rust tests claim theirs the same way
// (tests/support/ports.rs), so no two tests running side by side get one port.
var claims []net.Listener

func freePort() int {
	for i := 0; i < 1000; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		claim, err := net.Listen("unix", fmt.Sprintf("@punctual-test-port-%d", port))
		if err == nil {
			claims = append(claims, claim)
			return port
		}
	}
	panic("no unclaimed port in 1,000 binds of port 0")
}

// server is one running punctual.
type server struct {
	cmd  *exec.Cmd
	URL  string
	port int
	log  *os.File
}

// startRedis runs redis-server on a free port, without persistence.
func startRedis() (*server, error) {
	port := freePort()
	dir, err := os.MkdirTemp("", "punctual-go-redis-")
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redis-server (scripts/test --setup installs it): %w", err)
	}
	s := &server{cmd: cmd, URL: fmt.Sprintf("redis://127.0.0.1:%d", port), port: port, log: log}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return s, nil
		}
	}
	s.stop()
	return nil, fmt.Errorf("redis-server did not listen within 10 s")
}

// startServer runs `punctual serve` on a free port with toml as its configuration and a
// journal in a temporary directory (or args' --redis store), and waits for /healthz to answer 200.
func startServer(toml string, args ...string) (*server, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "punctual-go-client-")
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "punctual.toml")
	if err := os.WriteFile(config, []byte(toml), 0o600); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	port := freePort()
	all := []string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--config", config,
		"--shards", "2", "--pinning", "none", "--spin-us", "0", "--shard-capacity", "100000"}
	if len(args) == 0 || args[0] != "--redis" {
		all = append(all, "--store", "journal", "--data-dir", filepath.Join(dir, "journal"), "--fsync", "everysec")
	}
	all = append(all, args...)
	cmd := exec.Command(bin, all...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, URL: fmt.Sprintf("http://127.0.0.1:%d", port), port: port, log: log}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r, err := http.Get(s.URL + "/healthz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return s, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.stop()
	out, _ := os.ReadFile(log.Name())
	return nil, fmt.Errorf("punctual did not answer /healthz 200 within 30 s:\n%s", out)
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(filepath.Dir(s.log.Name()))
}

// signal sends sig; after SIGSTOP it waits until every thread of the server is stopped.
func (s *server) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
	for end := time.Now().Add(10 * time.Second); sig == syscall.SIGSTOP; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the server's threads did not all stop within 10 s")
		}
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", s.cmd.Process.Pid))
		stopped := len(tasks) > 0
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			// The state follows the command's closing parenthesis: "pid (comm) T …".
			if i := strings.LastIndexByte(string(b), ')'); err != nil || i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
				stopped = false
			}
		}
		if stopped {
			return
		}
	}
}

// receiver is the tests' webhook endpoint: each test mounts its handler under a path of
// its own.
var receiver = struct {
	sync.Mutex
	srv      *httptest.Server
	handlers map[string]http.Handler
}{handlers: map[string]http.Handler{}}

func mount(path string, h http.Handler) string {
	receiver.Lock()
	defer receiver.Unlock()
	receiver.handlers[path] = h
	return receiver.srv.URL + path
}

// Tenants of the second run: tokens, a quota, a rate, signing secrets.
const (
	acmeToken  = "acme-token-0123456789abcdef0123456789"
	stdToken   = "std-token-0123456789abcdef0123456789ab"
	newSecret  = "rotation-new-0123456789abcdef0123456789"
	oldSecret  = "rotation-old-0123456789abcdef0123456789"
	whsec      = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	whsecOld   = "whsec_dGhpcy1pcy10aGUtb2xkLWtleS0wMTIzNDU2Nzg5"
	slowToken  = "slow-token-0123456789abcdef0123456789ab"
	quotaToken = "quota-token-0123456789abcdef0123456789a"
	pullToken  = "pull-token-0123456789abcdef0123456789ab"
)

// open is the first run (no tenants: every tenant open), tenants the second. examplePort is
// where a test runs examples/receiver, allowed as a callback.
var (
	open, tenants *server
	examplePort   int
)

func TestMain(m *testing.M) {
	receiver.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		receiver.Lock()
		h := receiver.handlers[r.URL.Path]
		receiver.Unlock()
		if h == nil {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	examplePort = freePort()
	allow := fmt.Sprintf("callback_allow = [%q, \"http://127.0.0.1:%d/\"]\ncallback_allow_networks = [\"127.0.0.1/32\"]\n", receiver.srv.URL+"/", examplePort)
	var err error
	open, err = startServer(allow + "retry_base_delay_ms = 50\nretry_max_delay_ms = 200\n")
	if err == nil {
		tenants, err = startServer(allow + strings.Join([]string{
			"[tenants.acme]", fmt.Sprintf("token = %q", acmeToken),
			fmt.Sprintf("webhook_secrets = [%q, %q]", newSecret, oldSecret),
			"[tenants.std]", fmt.Sprintf("token = %q", stdToken), `webhook_signature = "standard"`,
			fmt.Sprintf("webhook_secrets = [%q, %q]", whsec, whsecOld),
			"[tenants.slow]", fmt.Sprintf("token = %q", slowToken), "max_requests_per_s = 1", "burst = 1",
			"[tenants.capped]", fmt.Sprintf("token = %q", quotaToken), "max_pending = 2",
			"[tenants.pull]", fmt.Sprintf("token = %q", pullToken), "queue = true",
		}, "\n") + "\n" + consumeTenants())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The README's examples read the server's address from the environment.
	os.Setenv("PUNCTUAL_URL", open.URL)
	os.Setenv("PUNCTUAL_QUEUE_URL", tenants.URL)
	os.Setenv("PUNCTUAL_TOKEN", queueToken("orders"))
	code := m.Run()
	open.stop()
	tenants.stop()
	receiver.srv.Close()
	os.Exit(code)
}

// ctx is a test call's context: bounded, so that a hang fails the test.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
