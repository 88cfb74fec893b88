package aws_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/imds"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/provisiontest"
)

func fakeProvider(t *testing.T) (*aws.AWS, *ec2test.Server) {
	t.Helper()
	srv := ec2test.New(t)
	p, err := aws.New(srv.Settings())
	if err != nil {
		t.Fatalf("aws.New: %v", err)
	}
	return p, srv
}

// live lists the fake's instances that carry all the labels and are not
// terminated or on their way there.
func live(srv *ec2test.Server, labels map[string]string) []string {
	var out []string
next:
	for _, inst := range srv.Instances() {
		if inst.State == "terminated" || inst.State == "shutting-down" {
			continue
		}
		for k, v := range labels {
			if inst.Tags[k] != v {
				continue next
			}
		}
		out = append(out, inst.ID+" "+inst.State)
	}
	return out
}

// TestConformanceFake runs the suite where every state change takes a
// while, as on EC2, on instances launched with hibernation, so that all
// five verbs run.
func TestConformanceFake(t *testing.T) {
	provisiontest.Run(t, func(t *testing.T) provisiontest.Target {
		p, srv := fakeProvider(t)
		srv.SetDelay(30 * time.Millisecond)
		srv.NoCapacity("c6i.large")
		return provisiontest.Target{
			Provider: p,
			Spec: provision.Spec{Extra: map[string]any{
				"ami": ec2test.ImageAL2023, "instance_type": "t3.micro", "hibernation": true,
				"key_name": "ops", "security_groups": []any{"sg-0123456789abcdef0", "default"},
			}},
			Invalid: append(invalid[:len(invalid):len(invalid)],
				provisiontest.Invalid{Extra: map[string]any{"spot": true}, Field: "extra.hibernation"},
				provisiontest.Invalid{Extra: map[string]any{"max_price": "0.05"}, Field: "extra.max_price"},
			),
			Failures: []provisiontest.Failure{
				{Name: "launch fails while pending", Extra: map[string]any{"ami": ec2test.ImageFailsLaunch}},
				{Name: "no capacity", Extra: map[string]any{"instance_type": "c6i.large"}},
				{Name: "unknown AMI", Extra: map[string]any{"ami": "ami-0000000000000000f"}},
			},
			Leftovers: func(t *testing.T, labels map[string]string) []string { return live(srv, labels) },
		}
	})
}

func TestProvisionWaitsForRunning(t *testing.T) {
	p, srv := fakeProvider(t)
	srv.SetDelay(300 * time.Millisecond)
	start := time.Now()
	d, err := p.Provision(ctxFor(t), provision.Spec{Name: "slow", Extra: map[string]any{
		"ami": ec2test.ImageUbuntu, "cpu": 2, "memoryMB": 3000, "user_data": "#cloud-config\nruncmd: [echo hi]\n",
	}})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if el := time.Since(start); el < 300*time.Millisecond || d.State != provision.StateRunning {
		t.Errorf("Provision returned %s after %v, want running after the fake's 300ms", d.State, el)
	}
	if n := srv.Calls("DescribeInstances"); n < 3 {
		t.Errorf("Provision asked for the state %d times; want it polled while pending", n)
	}
	insts := srv.Instances()
	if len(insts) != 1 {
		t.Fatalf("instances = %+v", insts)
	}
	inst := insts[0]
	if inst.InstanceType != "t3.medium" || d.Extra["instance_type"] != "t3.medium" {
		t.Errorf("instance type %s (Extra %v), want t3.medium: the cheapest with 2 vCPUs and 3000 MiB", inst.InstanceType, d.Extra["instance_type"])
	}
	if inst.UserData != "#cloud-config\nruncmd: [echo hi]\n" {
		t.Errorf("user data %q", inst.UserData)
	}
	if ud, _ := d.Extra["user_data"].(string); !strings.HasPrefix(ud, "(32 bytes, sha256 ") {
		t.Errorf("Extra user_data = %q, want its size and hash only: it may hold a secret", ud)
	}
	if inst.Tags["Name"] != "slow" || inst.Tags["nodemgr.deployment"] != "slow" {
		t.Errorf("tags %v, want Name and nodemgr.deployment slow", inst.Tags)
	}
	if !strings.HasPrefix(inst.ClientToken, "nodemgr-") {
		t.Errorf("ClientToken %q, want one derived from the deployment", inst.ClientToken)
	}
	if d.Address != "" && !strings.HasPrefix(d.Address, "203.0.113.") {
		t.Errorf("Address %q, want the public IP", d.Address)
	}
}

func TestLostResponseMakesOneInstance(t *testing.T) {
	p, srv := fakeProvider(t)
	srv.LoseRunResponses(1)
	spec := provision.Spec{Name: "lost", Labels: map[string]string{"nodemgr.deployment-id": "dep-lost"}, Extra: map[string]any{"ami": ec2test.ImageAL2023, "instance_type": "t3.micro"}}
	d, err := p.Provision(ctxFor(t), spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if n := srv.Calls("RunInstances"); n != 2 {
		t.Errorf("RunInstances calls = %d, want 2: the SDK retries the lost one with the same ClientToken", n)
	}
	if got := live(srv, nil); len(got) != 1 || !strings.HasPrefix(got[0], d.ResourceID) {
		t.Errorf("instances = %v, want just %s", got, d.ResourceID)
	}
	// Provision again, as the orchestrator does after a crash: the same
	// instance, and no RunInstances at all.
	again, err := p.Provision(ctxFor(t), spec)
	if err != nil || again.ResourceID != d.ResourceID {
		t.Errorf("Provision again = %s, %v, want %s", again.ResourceID, err, d.ResourceID)
	}
	if n := srv.Calls("RunInstances"); n != 2 {
		t.Errorf("RunInstances calls = %d after a retried Provision, want still 2", n)
	}
}

func TestSpotInterruption(t *testing.T) {
	p, srv := fakeProvider(t)
	srv.SetDelay(50 * time.Millisecond)
	d, err := p.Provision(ctxFor(t), provision.Spec{Name: "spot", Labels: map[string]string{"nodemgr.owner": "o1"},
		Extra: map[string]any{"ami": ec2test.ImageAL2023, "instance_type": "t3.micro", "spot": true, "max_price": "0.004"}})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if inst := srv.Instances()[0]; !inst.Spot || inst.MaxPrice != "0.004" {
		t.Errorf("launched spot %v at %q, want spot at 0.004", inst.Spot, inst.MaxPrice)
	}
	// Its agent would hear the two minutes' notice first, on the
	// metadata service the provider names for spot instances only.
	if ep := p.NoticeEndpoint(d); ep != imds.DefaultEndpoint {
		t.Errorf("NoticeEndpoint(a spot instance) = %q, want %s", ep, imds.DefaultEndpoint)
	}
	if ep := p.NoticeEndpoint(provision.Deployment{Extra: map[string]any{"spot": false}}); ep != "" {
		t.Errorf("NoticeEndpoint(an on-demand instance) = %q, want none", ep)
	}
	at := time.Now().Add(2 * time.Minute).UTC().Truncate(time.Second)
	if err := srv.NoticeInterruption(t, d.ResourceID, "terminate", at); err != nil {
		t.Fatal(err)
	}
	md, _ := srv.IMDS(t, d.ResourceID)
	if ns, err := imds.New(md.URL).Notices(ctxFor(t)); err != nil || len(ns) != 1 || !ns[0].Time.Equal(at) {
		t.Errorf("the instance's metadata service gives %v, %v; want the interruption at %s", ns, err, at)
	}
	if err := srv.InterruptSpot(d.ResourceID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var st, why string
	for time.Now().Before(deadline) {
		if st, why, err = p.StateReason(ctxFor(t), d); err != nil {
			t.Fatalf("StateReason: %v", err)
		}
		if st == provision.StateTerminated {
			break
		}
		if st != provision.StateShuttingDown {
			t.Fatalf("StateReason = %q, want shutting-down on the way to terminated", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st != provision.StateTerminated {
		t.Fatalf("State = %s, want terminated", st)
	}
	for _, want := range []string{"AWS took the spot instance back", "Server.SpotInstanceTermination", "on-demand"} {
		if !strings.Contains(why, want) {
			t.Errorf("reason %q lacks %q", why, want)
		}
	}
	t.Logf("reason: %s", why)
	if found, err := p.Find(ctxFor(t), map[string]string{"nodemgr.owner": "o1"}); err != nil || len(found) != 0 {
		t.Errorf("Find after the interruption = %v, %v, want none", found, err)
	}
}

func TestCapacityError(t *testing.T) {
	p, srv := fakeProvider(t)
	srv.NoCapacity("t3.micro")
	_, err := p.Provision(ctxFor(t), provision.Spec{Name: "full", Extra: map[string]any{"ami": ec2test.ImageAL2023, "instance_type": "t3.micro", "spot": true}})
	if !errors.Is(err, errdefs.ErrUnavailable) || !errors.Is(err, provision.ErrNoCapacity) {
		t.Fatalf("Provision = %v, want unavailable and no capacity", err)
	}
	msg := errdefs.Message(err)
	for _, want := range []string{"no t3.micro capacity", "another instance type", "another zone", "InsufficientInstanceCapacity"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "operation error") || strings.Contains(msg, "RequestID") {
		t.Errorf("message %q carries the SDK's preamble", msg)
	}
	t.Logf("Provision: %s", msg)
	if n := srv.Calls("RunInstances"); n != 1 {
		t.Errorf("RunInstances calls = %d, want 1: retrying at once does not bring capacity", n)
	}
	if got := live(srv, nil); len(got) != 0 {
		t.Errorf("instances = %v, want none", got)
	}
}

func TestLaunchFailureSaysWhy(t *testing.T) {
	p, srv := fakeProvider(t)
	srv.SetDelay(20 * time.Millisecond)
	_, err := p.Provision(ctxFor(t), provision.Spec{Name: "broken", Extra: map[string]any{"ami": ec2test.ImageFailsLaunch, "instance_type": "t3.micro"}})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "ended while launching") || !strings.Contains(err.Error(), "Server.InternalError") {
		t.Errorf("Provision = %v, want unavailable saying the instance ended, with EC2's reason", err)
	}
}

// TestVerbRules: EC2's rules are refused before any call that changes
// the instance, whether the deployment's Extra or, for one Find returned,
// the instance itself says how it was launched.
func TestVerbRules(t *testing.T) {
	p, srv := fakeProvider(t)
	spot, err := p.Provision(ctxFor(t), provision.Spec{Name: "spot", Labels: map[string]string{"role": "spot"}, Extra: map[string]any{"ami": ec2test.ImageAL2023, "instance_type": "t3.micro", "spot": true}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := p.Provision(ctxFor(t), provision.Spec{Name: "plain", Labels: map[string]string{"role": "plain"}, Extra: map[string]any{"ami": ec2test.ImageAL2023, "instance_type": "t3.micro"}})
	if err != nil {
		t.Fatal(err)
	}
	found := func(role string) provision.Deployment {
		fs, err := p.Find(ctxFor(t), map[string]string{"role": role})
		if err != nil || len(fs) != 1 {
			t.Fatalf("Find(role=%s) = %v, %v", role, fs, err)
		}
		return fs[0]
	}
	tests := []struct {
		name string
		d    provision.Deployment
		verb string
		want string
	}{
		{"stop a spot instance", spot, provision.VerbStop, "one-time spot instance"},
		{"hibernate a spot instance", spot, provision.VerbHibernate, "one-time spot instance"},
		{"hibernate without hibernation", plain, provision.VerbHibernate, "launched without hibernation"},
		{"stop a found spot instance", found("spot"), provision.VerbStop, "one-time spot instance"},
		{"hibernate a found instance without hibernation", found("plain"), provision.VerbHibernate, "launched without hibernation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			do := map[string]func() error{
				provision.VerbStop:      func() error { return p.Stop(ctxFor(t), tc.d) },
				provision.VerbHibernate: func() error { return p.Hibernate(ctxFor(t), tc.d) },
			}[tc.verb]
			for what, err := range map[string]error{"Do": provision.Do(ctxFor(t), p, tc.verb, tc.d), tc.verb: do()} {
				var fe *errdefs.FieldError
				if !errors.As(err, &fe) || fe.Field != "verb" || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s(%s) = %v, want invalid verb saying %q", what, tc.verb, err, tc.want)
				}
			}
		})
	}
	if n := srv.Calls("StopInstances"); n != 0 {
		t.Errorf("StopInstances calls = %d, want none", n)
	}
	for _, d := range []provision.Deployment{spot, plain} {
		if st, err := p.State(ctxFor(t), d); err != nil || st != provision.StateRunning {
			t.Errorf("State(%s) = %s, %v, want running", d.Name, st, err)
		}
	}
}

// TestProvisionAgainAfterStop: EC2 answers a repeated ClientToken with the
// instance it launched for it, even one stopped since; Provision says so
// and leaves it stopped rather than terminating someone's machine.
func TestProvisionAgainAfterStop(t *testing.T) {
	p, srv := fakeProvider(t)
	spec := provision.Spec{Name: "again", Labels: map[string]string{"nodemgr.deployment-id": "dep-again"}, Extra: map[string]any{"ami": ec2test.ImageAL2023, "instance_type": "t3.micro"}}
	d, err := p.Provision(ctxFor(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctxFor(t), d); err != nil {
		t.Fatal(err)
	}
	_, err = p.Provision(ctxFor(t), spec)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), d.ResourceID) || !strings.Contains(err.Error(), "is stopped") {
		t.Errorf("Provision again = %v, want a conflict naming the stopped instance %s", err, d.ResourceID)
	}
	if insts := srv.Instances(); len(insts) != 1 || insts[0].State != "stopped" {
		t.Errorf("instances = %+v, want the one, still stopped", insts)
	}
}

// TestServerDeploymentsOfOneName: the server labels each deployment with
// its ID under nodemgr.deployment; two deployments of one name are two
// instances, and a retry of one is still one.
func TestServerDeploymentsOfOneName(t *testing.T) {
	p, srv := fakeProvider(t)
	extra := map[string]any{"ami": ec2test.ImageAL2023, "instance_type": "t3.micro"}
	made := map[string]bool{}
	for _, id := range []string{"d-1", "d-2", "d-1"} {
		d, err := p.Provision(ctxFor(t), provision.Spec{Name: "web", Extra: extra, Labels: map[string]string{"nodemgr.deployment": id}})
		if err != nil {
			t.Fatal(err)
		}
		made[d.ResourceID] = true
		if d.Name != "web" || d.Labels["nodemgr.deployment-id"] != id {
			t.Errorf("deployment %s: Name %q, Labels %v; want web, and nodemgr.deployment-id %s", id, d.Name, d.Labels, id)
		}
	}
	if len(made) != 2 || len(live(srv, nil)) != 2 {
		t.Errorf("made %v, the fake holds %v; want two instances", made, live(srv, nil))
	}
}
