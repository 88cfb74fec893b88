// Package ec2test gives tests an EC2 endpoint to run the real AWS SDK
// against: Server, a small in-process fake that speaks EC2's Query
// protocol (form POSTs signed with SigV4, XML answers in EC2's shapes)
// through an httptest.Server, and Moto, which starts the moto emulator
// (python3 -m moto.server) when this machine has it.
//
// The fake knows only the actions the aws provider calls (RunInstances,
// DescribeInstances, DescribeImages, StartInstances, StopInstances,
// RebootInstances, TerminateInstances), and does what moto cannot:
// states that take a while to change (SetDelay), spot interruptions
// (InterruptSpot, after the notice its instance metadata service gives
// with NoticeInterruption: IMDS), launches refused for want of capacity (NoCapacity) or
// that fail after they started (an Image with FailLaunch), responses lost
// on the way (LoseRunResponses), and EC2's rules on stopping spot
// instances and hibernating ones launched without hibernation.
package ec2test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// Region is the region the fake serves.
const Region = "us-east-1"

// Account is the account the fake's callers own ("self").
const Account = "123456789012"

// Images the fake starts with. ImageFailsLaunch's instances end while
// pending, with the state reason Server.InternalError.
const (
	ImageAL2023Old   = "ami-0a1b2c3d4e5f60001"
	ImageAL2023      = "ami-0a1b2c3d4e5f60002"
	ImageAL2023ARM   = "ami-0a1b2c3d4e5f60003"
	ImageUbuntu      = "ami-0c0c0c0c0c0c00001"
	ImageFailsLaunch = "ami-0bad0bad0bad0bad0"
)

// Image is an AMI the fake knows.
type Image struct {
	ID           string
	Name         string
	Owner        string // an account ID
	OwnerAlias   string // "amazon", or empty
	Architecture string // x86_64 or arm64
	Created      time.Time
	// FailLaunch, if set, is the state reason code with which every
	// instance launched from the image ends while pending, as a launch
	// EC2 gives up on does (Server.InternalError, Client.VolumeLimitExceeded).
	FailLaunch string
}

// DefaultImages are the images a new Server knows.
func DefaultImages() []Image {
	day := func(s string) time.Time { t, _ := time.Parse(time.DateOnly, s); return t }
	return []Image{
		{ID: ImageAL2023Old, Name: "al2023-ami-2023.6.20250101.0-kernel-6.1-x86_64", Owner: "137112412989", OwnerAlias: "amazon", Architecture: "x86_64", Created: day("2025-01-01")},
		{ID: ImageAL2023, Name: "al2023-ami-2023.7.20250601.0-kernel-6.1-x86_64", Owner: "137112412989", OwnerAlias: "amazon", Architecture: "x86_64", Created: day("2025-06-01")},
		{ID: ImageAL2023ARM, Name: "al2023-ami-2023.7.20250601.0-kernel-6.1-arm64", Owner: "137112412989", OwnerAlias: "amazon", Architecture: "arm64", Created: day("2025-06-01")},
		{ID: ImageUbuntu, Name: "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20250610", Owner: "099720109477", Architecture: "x86_64", Created: day("2025-06-10")},
		{ID: ImageFailsLaunch, Name: "nodemgr-test-fails-launch", Owner: Account, Architecture: "x86_64", Created: day("2025-01-01"), FailLaunch: "Server.InternalError"},
	}
}

// Server is a fake EC2 endpoint. Its methods are safe for concurrent use.
type Server struct {
	// URL is the endpoint, for the provider's endpoint setting.
	URL string

	mu         sync.Mutex
	delay      time.Duration
	images     []Image
	instances  []*instance
	tokens     map[string]*instance // ClientToken → the instance it launched
	noCapacity map[string]bool      // instance types
	lose       int                  // RunInstances responses still to lose
	calls      map[string]int
	seq        int
	// onLaunch and onEnd, when set (RunMachines), are told of each
	// instance launched and each that starts to end, on a goroutine of
	// their own.
	onLaunch, onEnd func(Instance)
	imds            map[string]*IMDS // instance → its metadata service (IMDS)
}

// Instance is what the fake holds of an instance.
type Instance struct {
	ID, ImageID, InstanceType string
	State                     string // EC2's state name
	StateReason               string // the state reason code, if any
	Spot                      bool
	MaxPrice                  string
	Hibernation               bool
	Tags                      map[string]string
	UserData                  string // decoded
	ClientToken               string
	KeyName, SubnetID         string
	SecurityGroups            []string // IDs and names as given
	Launched                  time.Time
}

type instance struct {
	Instance
	next       string    // the state it moves to at until
	nextReason [2]string // the state reason it gets then
	until      time.Time
	reason     [2]string // state reason code and message
	transition string    // EC2's StateTransitionReason
	arch       string
	n          int // launch number, for addresses
}

// New starts a fake EC2 endpoint, stopped when the test ends, and sets
// the test's environment for the SDK as Env does.
func New(t testing.TB) *Server {
	t.Helper()
	Env(t)
	s := &Server{
		images:     DefaultImages(),
		tokens:     map[string]*instance{},
		noCapacity: map[string]bool{},
		calls:      map[string]int{},
	}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Env sets the test's environment so that the SDK signs with static
// credentials, reads no shared AWS files and never asks the instance
// metadata service for anything.
func Env(t testing.TB) {
	t.Helper()
	dir := t.TempDir()
	for _, k := range []string{"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2"} {
		t.Setenv(k, "") // restored when the test ends
		os.Unsetenv(k)
	}
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           "AKIAIOSFODNN7EXAMPLE",
		"AWS_SECRET_ACCESS_KEY":       "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
		"AWS_REGION":                  Region,
		"AWS_DEFAULT_REGION":          Region,
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CONFIG_FILE":             filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
	} {
		t.Setenv(k, v)
	}
}

// Settings are the aws provider's settings for this endpoint; states are
// polled every 10ms.
func (s *Server) Settings() map[string]string {
	return map[string]string{"region": Region, "endpoint": s.URL, "poll_interval": "10ms", "wait_timeout": "1m"}
}

// SetDelay makes every state change take d (pending → running, stopping
// → stopped, shutting-down → terminated); 0, the default, is at once.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// AddImage adds an AMI.
func (s *Server) AddImage(img Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images = append(s.images, img)
}

// NoCapacity makes RunInstances refuse instanceType with
// InsufficientInstanceCapacity, as EC2 does when a zone runs out.
func (s *Server) NoCapacity(instanceType string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noCapacity[instanceType] = true
}

// LoseRunResponses makes the next n RunInstances calls launch their
// instance and then answer 500 InternalError, as a call whose response was
// lost looks to the caller.
func (s *Server) LoseRunResponses(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lose = n
}

// InterruptSpot takes a running or pending spot instance back, as AWS
// does when it needs the capacity: it goes shutting-down, then
// terminated, with the state reason Server.SpotInstanceTermination.
func (s *Server) InterruptSpot(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst := s.find(id)
	if inst == nil {
		return fmt.Errorf("no instance %s", id)
	}
	s.advance(inst)
	if !inst.Spot {
		return fmt.Errorf("instance %s is not a spot instance", id)
	}
	if inst.State != "running" && inst.State != "pending" {
		return fmt.Errorf("instance %s is %s", id, inst.State)
	}
	s.move(inst, "shutting-down", "terminated", [2]string{"Server.SpotInstanceTermination", "Server.SpotInstanceTermination: Spot instance termination"})
	inst.transition = "Service initiated (" + time.Now().UTC().Format("2006-01-02 15:04:05 MST") + ")"
	s.ended(inst)
	return nil
}

// launched and ended tell RunMachines of an instance; under s.mu.
func (s *Server) launched(inst *instance) { s.tell(s.onLaunch, inst) }
func (s *Server) ended(inst *instance)    { s.tell(s.onEnd, inst) }

func (s *Server) tell(f func(Instance), inst *instance) {
	if f == nil {
		return
	}
	cp := inst.Instance
	cp.Tags = cloneMap(inst.Tags)
	go f(cp)
}

// Instances returns every instance the fake launched, terminated ones
// too, in launch order.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Instance, len(s.instances))
	for i, inst := range s.instances {
		s.advance(inst)
		out[i] = inst.Instance
		out[i].Tags = cloneMap(inst.Tags)
		out[i].SecurityGroups = slices.Clone(inst.SecurityGroups)
	}
	return out
}

// Calls returns how many requests for action the fake answered.
func (s *Server) Calls(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[action]
}
