// Package redistest starts real redis-server processes for tests: standalone
// servers, Redis Clusters, Sentinel failover groups, TLS. Each listens on a
// free port on 127.0.0.1 only, keeps its files in a temporary directory, and
// is stopped by t.Cleanup. Nothing here touches a server the test did not start.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// InstallHint says how to get redis-server where it is missing.
const InstallHint = "redis-server is not installed: install Redis 7 " +
	"(Debian/Ubuntu: sudo apt-get install redis-server; macOS: brew install redis) " +
	"or run ./test.sh, which installs it when run as root"

// ServerEnv names the variable that, when set, replaces redis-server: a
// command line prefix the server's arguments follow, split at spaces, e.g.
// "valkey-server", or a loader that runs another distribution's binary.
const ServerEnv = "DLOCK_REDIS_SERVER"

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 20 * time.Second

// Server is one redis-server process.
type Server struct {
	t    T
	bin  []string // the command line before the arguments (a Sentinel's ends "<conf> --sentinel")
	dir  string
	args []string // extra configuration, as command-line arguments
	tls  *TLS     // set: the server speaks TLS only, password required

	mu     sync.Mutex
	port   int
	cmd    *exec.Cmd
	exited context.Context // done once cmd has exited
	client *redis.Client   // Client's, made on first use
}

// Start starts a standalone redis-server that keeps nothing on disk.
// Extra arguments are redis-server configuration, e.g. "--appendonly", "yes".
func Start(t T, args ...string) *Server {
	t.Helper()
	s := newServer(t, args...)
	s.startFresh()
	return s
}

// StartMasters starts n independent standalone servers.
func StartMasters(t T, n int) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(t)
	}
	return servers
}

func newServer(t T, args ...string) *Server {
	t.Helper()
	bin, err := serverCommand()
	if err != nil {
		t.Fatalf("%v", err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), args: args}
	t.Cleanup(s.Kill)
	return s
}

// serverCommand is $DLOCK_REDIS_SERVER's words, or redis-server.
func serverCommand() ([]string, error) {
	words := strings.Fields(os.Getenv(ServerEnv))
	if len(words) == 0 {
		words = []string{"redis-server"}
		if _, err := exec.LookPath(words[0]); err != nil {
			return nil, errors.New(InstallHint)
		}
	} else if _, err := exec.LookPath(words[0]); err != nil {
		return nil, fmt.Errorf("redistest: %s=%q: %w", ServerEnv, os.Getenv(ServerEnv), err)
	}
	return words, nil
}

// startFresh starts the server on a new free port, trying again when another
// process takes the port between our probe and redis-server's bind.
func (s *Server) startFresh() {
	s.t.Helper()
	var lastErr error
	for range 5 {
		if lastErr = s.startOn(freePort(s.t)); lastErr == nil {
			return
		}
	}
	s.t.Fatalf("redistest: starting redis-server: %v", lastErr)
}

func (s *Server) startOn(port int) error {
	logFile := filepath.Join(s.dir, "redis.log")
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--daemonize", "no", "--dir", s.dir, "--logfile", logFile,
		"--save", "", "--appendonly", "no"}
	if s.tls != nil {
		args[1] = "0" // no plain port
		args = append(args, "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", s.tls.CAFile, "--tls-key-file", s.tls.keyFile,
			"--tls-ca-cert-file", s.tls.CAFile, "--tls-auth-clients", "no",
			"--requirepass", s.tls.Password)
	}
	cmd := exec.Command(s.bin[0], slices.Concat(s.bin[1:], args, s.args)...)
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited, exit := context.WithCancel(context.Background())
	go func() {
		_ = cmd.Wait()
		exit()
	}()
	s.mu.Lock()
	s.port, s.cmd, s.exited = port, cmd, exited
	s.mu.Unlock()

	if err := waitReady(s.options(), cmd.Process.Pid, exited); err != nil {
		s.Kill()
		log, _ := os.ReadFile(logFile)
		lines := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
		return fmt.Errorf("%w\n%s", err, strings.Join(lines[max(0, len(lines)-10):], "\n"))
	}
	return nil
}

// waitReady polls until the server answers or exits. The answer must come
// from our own process: should another test's server win the race for the
// port, ours exits and we must not mistake theirs for it.
func waitReady(opts *redis.Options, pid int, exited context.Context) error {
	opts.MaxRetries, opts.DialTimeout = -1, time.Second
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(exited, startTimeout)
	defer cancel()
	var info string
	var err error
	if until(ctx, 10*time.Millisecond, func() bool {
		info, err = rdb.Info(ctx, "server").Result()
		return err == nil
	}) != nil {
		if exited.Err() != nil {
			return errors.New("redis-server exited during start")
		}
		return fmt.Errorf("redis-server did not answer PING within %v: %w", startTimeout, err)
	}
	if !strings.Contains(info, "process_id:"+strconv.Itoa(pid)+"\r\n") {
		return errors.New("another server answers on the port")
	}
	return nil
}

func (s *Server) options() *redis.Options {
	opts := &redis.Options{Addr: s.Addr()}
	if s.tls != nil {
		opts.TLSConfig, opts.Password = s.tls.ClientConfig(), s.tls.Password
	}
	return opts
}

// Addr returns the server's host:port.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Pid is the server's process id (for /proc/<pid>/schedstat, say), new at
// each restart; 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.exited.Err() != nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Client returns the server's go-redis client, one for every call (a soak
// calls it per run), closed by Close or at the test's end.
func (s *Server) Client() *redis.Client {
	opts := s.options()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		rdb := redis.NewClient(opts)
		s.t.Cleanup(func() { _ = rdb.Close() })
		s.client = rdb
	}
	return s.client
}

// Close kills the server for good and closes its Client: for a server a
// test is done with before it ends.
func (s *Server) Close() {
	s.Kill()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		_ = s.client.Close()
		s.client = nil
	}
}

// Kill stops the server at once (SIGKILL), losing whatever it held in memory.
// Killing a stopped server does nothing.
func (s *Server) Kill() {
	if exited := s.signal(syscall.SIGKILL); exited != nil {
		<-exited.Done()
	}
}

// Restart kills the server and starts it again on the same port with the
// same directory: without persistence it comes back empty.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.restart(); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

func (s *Server) restart() error {
	s.Kill()
	s.mu.Lock()
	port := s.port
	s.mu.Unlock()
	if err := s.startOn(port); err != nil {
		return fmt.Errorf("restarting redis-server on port %d: %w", port, err)
	}
	return nil
}

// replication reports whether the server's INFO replication says want
// ("role:master", "master_link_status:up").
func (s *Server) replication(ctx context.Context, want string) bool {
	info, err := s.Client().Info(ctx, "replication").Result()
	return err == nil && strings.Contains(info, want)
}

// until asks ok every pause until it holds or ctx ends: the servers are
// other processes, with nothing to wait on but their answers.
func until(ctx context.Context, pause time.Duration, ok func() bool) error {
	for !ok() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
	return nil
}

// Pause freezes the server process (SIGSTOP): it keeps its connections but
// answers nothing, and its clock-driven expiry stops until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// signal sends sig to the server's process, if it started, and returns
// what is done once that process has exited (nil if none started).
func (s *Server) signal(sig syscall.Signal) context.Context {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
	return exited
}

// freePort asks the kernel for a port that is free on 127.0.0.1 now.
func freePort(t T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
