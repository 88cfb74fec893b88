package aws_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/provisiontest"
)

// motoProvider returns the provider for the shared moto server, reset,
// and a raw client to check its work with.
func motoProvider(t *testing.T) (*aws.AWS, *ec2.Client) {
	t.Helper()
	m := ec2test.StartMoto(t)
	p, err := aws.New(m.Settings())
	if err != nil {
		t.Fatalf("aws.New: %v", err)
	}
	return p, rawClient(t, m.URL)
}

// motoImage returns the ID of an AMI that moto ships.
func motoImage(t *testing.T, c *ec2.Client, name string) string {
	t.Helper()
	out, err := c.DescribeImages(ctxFor(t), &ec2.DescribeImagesInput{
		Owners:  []string{"amazon"},
		Filters: []types.Filter{{Name: awssdk.String("name"), Values: []string{name}}},
	})
	if err != nil || len(out.Images) == 0 {
		t.Fatalf("DescribeImages(%s) = %v, %v; want moto's default AMI", name, out, err)
	}
	return awssdk.ToString(out.Images[0].ImageId)
}

// invalid are bad Extras every target refuses.
var invalid = []provisiontest.Invalid{
	{Extra: map[string]any{"ami": 42, "ami_lookup": nil}, Field: "extra.ami"},
	{Extra: map[string]any{"ami": "ubuntu:24.04", "ami_lookup": nil}, Field: "extra.ami"},
	{Extra: map[string]any{"ami_lookup": map[string]any{"name": "al2023-*"}}, Field: "extra.ami_lookup.owner"},
	{Extra: map[string]any{"instance_type": "huge"}, Field: "extra.instance_type"},
	{Extra: map[string]any{"instance_type": nil, "cpu": "lots"}, Field: "extra.cpu"},
	{Extra: map[string]any{"spot": "yes"}, Field: "extra.spot"},
	{Extra: map[string]any{"security_groups": []any{"sg-1", 7}}, Field: "extra.security_groups[1]"},
	{Extra: map[string]any{"user_data": strings.Repeat("#", 16<<10+1)}, Field: "extra.user_data"},
	{Extra: map[string]any{"tags": map[string]any{"aws:owner": "me"}}, Field: "extra.tags.aws:owner"},
}

func motoTarget(t *testing.T, extra map[string]any) provisiontest.Target {
	p, c := motoProvider(t)
	if extra["ami"] == "moto" {
		extra["ami"] = motoImage(t, c, "al2023-ami-2023.*-kernel-6.18-x86_64")
	}
	return provisiontest.Target{
		Provider: p,
		Spec:     provision.Spec{Extra: extra},
		Invalid:  invalid,
		Failures: []provisiontest.Failure{
			{Name: "unknown AMI", Extra: map[string]any{"ami": "ami-0000000000000000f", "ami_lookup": nil}},
			{Name: "unknown subnet", Extra: map[string]any{"subnet": "subnet-00000000000000000"}},
		},
		Leftovers: func(t *testing.T, labels map[string]string) []string { return ids(instances(t, c, labels)) },
	}
}

func TestConformanceMotoOnDemand(t *testing.T) {
	provisiontest.Run(t, func(t *testing.T) provisiontest.Target {
		return motoTarget(t, map[string]any{
			"ami_lookup": map[string]any{"name": "al2023-ami-2023.*-x86_64", "owner": "amazon"},
			"cpu":        2, "memoryMB": 2048, "user": "ec2-user",
			"user_data": "#!/bin/sh\necho nodemgr\n", "tags": map[string]any{"team": "infra"},
		})
	})
}

func TestConformanceMotoSpot(t *testing.T) {
	provisiontest.Run(t, func(t *testing.T) provisiontest.Target {
		return motoTarget(t, map[string]any{"ami": "moto", "instance_type": "t3.micro", "spot": true, "max_price": 0.01})
	})
}

func TestAMILookupMoto(t *testing.T) {
	p, c := motoProvider(t)
	tests := []struct {
		name     string
		lookup   map[string]any
		extra    map[string]any
		wantName string // the AMI's name
		wantType string
	}{
		{
			name:     "newest of two, ties by name",
			lookup:   map[string]any{"name": "al2023-ami-2023.*-x86_64", "owner": "amazon"},
			wantName: "al2023-ami-2023.11.20260427.1-kernel-6.18-x86_64", wantType: "t3.nano",
		},
		{
			name:     "arm64 picks an arm64 type",
			lookup:   map[string]any{"name": "al2023-ami-2023.*", "owner": "amazon", "architecture": "arm64"},
			extra:    map[string]any{"cpu": 4, "memoryMB": 8192},
			wantName: "al2023-ami-2023.11.20260427.1-kernel-6.18-arm64", wantType: "t4g.xlarge",
		},
		{
			name:     "instance type given",
			lookup:   map[string]any{"name": "amzn2-ami-kernel-5.10-hvm-*", "owner": "amazon"},
			extra:    map[string]any{"instance_type": "m5.large"},
			wantName: "amzn2-ami-kernel-5.10-hvm-2.0.20260427.1-x86_64-gp2", wantType: "m5.large",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			extra := map[string]any{"ami_lookup": tc.lookup, "image": "ubuntu:24.04"}
			for k, v := range tc.extra {
				extra[k] = v
			}
			d, err := p.Provision(ctxFor(t), provision.Spec{Name: "lookup", Extra: extra})
			if err != nil {
				t.Fatalf("Provision: %v", err)
			}
			t.Cleanup(func() { p.Destroy(ctxFor(t), d) })
			inst := instances(t, c, map[string]string{"Name": "lookup"})
			if len(inst) != 1 {
				t.Fatalf("instances = %v, want 1", ids(inst))
			}
			img, err := c.DescribeImages(ctxFor(t), &ec2.DescribeImagesInput{ImageIds: []string{awssdk.ToString(inst[0].ImageId)}})
			if err != nil || len(img.Images) != 1 {
				t.Fatalf("DescribeImages(%s) = %v", awssdk.ToString(inst[0].ImageId), err)
			}
			if got := awssdk.ToString(img.Images[0].Name); got != tc.wantName {
				t.Errorf("launched from %q, want %q", got, tc.wantName)
			}
			if got := string(inst[0].InstanceType); got != tc.wantType {
				t.Errorf("instance type %s, want %s", got, tc.wantType)
			}
			if d.Extra["instance_type"] != tc.wantType || d.Extra["ami"] != awssdk.ToString(inst[0].ImageId) {
				t.Errorf("Extra instance_type, ami = %v, %v; want %s, %s", d.Extra["instance_type"], d.Extra["ami"], tc.wantType, awssdk.ToString(inst[0].ImageId))
			}
			if chosen, _ := d.Extra["chosen"].(string); !strings.Contains(chosen, tc.wantName) {
				t.Errorf("Extra chosen = %q, want it to name the AMI %s", chosen, tc.wantName)
			}
			t.Logf("chosen: %s", d.Extra["chosen"])
		})
	}

	t.Run("nothing matches", func(t *testing.T) {
		_, err := p.Provision(ctxFor(t), provision.Spec{Name: "none", Extra: map[string]any{
			"ami_lookup": map[string]any{"name": "no-such-image-*", "owner": "amazon"}}})
		if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "no-such-image-*") {
			t.Errorf("Provision = %v, want not found naming the pattern", err)
		}
		if left := instances(t, c, nil); len(left) != 0 {
			t.Errorf("left %v", ids(left))
		}
	})
}

func TestIdempotentMoto(t *testing.T) {
	p, c := motoProvider(t)
	spec := provision.Spec{
		Name:   "twice",
		Labels: map[string]string{"nodemgr.deployment-id": "dep-1", "nodemgr.owner": "o"},
		Extra:  map[string]any{"ami": motoImage(t, c, "al2023-ami-2023.*-kernel-6.18-x86_64"), "instance_type": "t3.micro"},
	}
	first, err := p.Provision(ctxFor(t), spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	again, err := p.Provision(ctxFor(t), spec)
	if err != nil {
		t.Fatalf("Provision again: %v", err)
	}
	if again.ResourceID != first.ResourceID {
		t.Errorf("a retried Provision made %s beside %s, want the same instance", again.ResourceID, first.ResourceID)
	}
	if got := instances(t, c, map[string]string{"nodemgr.deployment-id": "dep-1"}); len(got) != 1 {
		t.Errorf("instances of deployment dep-1 = %v, want 1", ids(got))
	}
	// Another deployment of the same name is another instance.
	spec.Labels = map[string]string{"nodemgr.deployment-id": "dep-2"}
	other, err := p.Provision(ctxFor(t), spec)
	if err != nil {
		t.Fatalf("Provision dep-2: %v", err)
	}
	if other.ResourceID == first.ResourceID {
		t.Errorf("deployment dep-2 got dep-1's instance %s", first.ResourceID)
	}
}

func TestStateReasonMoto(t *testing.T) {
	p, c := motoProvider(t)
	d, err := p.Provision(ctxFor(t), provision.Spec{Name: "reason", Extra: map[string]any{"ami": motoImage(t, c, "al2023-ami-2023.*-kernel-6.18-x86_64"), "instance_type": "t3.micro"}})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if st, why, err := p.StateReason(ctxFor(t), d); err != nil || st != provision.StateRunning || why != "" {
		t.Errorf("StateReason(running) = %q, %q, %v; want running and no reason", st, why, err)
	}
	// Stopped behind nodemgr's back.
	if _, err := c.StopInstances(ctxFor(t), &ec2.StopInstancesInput{InstanceIds: []string{d.ResourceID}}); err != nil {
		t.Fatal(err)
	}
	st, why, err := p.StateReason(ctxFor(t), d)
	if err != nil || st != provision.StateStopped || !strings.Contains(why, "Client.UserInitiatedShutdown") {
		t.Errorf("StateReason(stopped) = %q, %q, %v; want stopped by a user", st, why, err)
	}
	if err := p.Start(ctxFor(t), provision.Deployment{Name: "gone", ResourceID: "i-0123456789abcdef0"}); !errdefs.IsNotFound(err) {
		t.Errorf("Start(unknown instance) = %v, want not found", err)
	}
	if st, err := p.State(ctxFor(t), provision.Deployment{Name: "gone", ResourceID: "i-0123456789abcdef0"}); err != nil || st != provision.StateTerminated {
		t.Errorf("State(unknown instance) = %q, %v, want terminated", st, err)
	}
	if err := p.Destroy(ctxFor(t), provision.Deployment{Name: "gone", ResourceID: "i-0123456789abcdef0"}); err != nil {
		t.Errorf("Destroy(unknown instance) = %v, want nil", err)
	}
	var fe *errdefs.FieldError
	if err := p.Destroy(ctxFor(t), provision.Deployment{Name: "none"}); !errors.As(err, &fe) || fe.Field != "resource_id" {
		t.Errorf("Destroy(no instance ID) = %v, want invalid resource_id", err)
	}
	if got := d.Executors; !slices.Equal(got, []string{"exec:ssh", "copy:sftp", "copy:rsync"}) {
		t.Errorf("Executors = %v", got)
	}
	if d.Address == "" {
		t.Errorf("Address is empty")
	}
}
