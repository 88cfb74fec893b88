package aws

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/provisiontest"
)

func TestParseExtra(t *testing.T) {
	tests := []struct {
		name  string
		extra map[string]any
		want  config
	}{
		{
			name:  "image is the AMI",
			extra: map[string]any{"image": "ami-0123456789abcdef0", "name": "t", "diskMB": 10, "hostname": "other's"},
			want:  config{ami: "ami-0123456789abcdef0", amiField: "extra.image"},
		},
		{
			name:  "ami wins over a generic image",
			extra: map[string]any{"image": "ubuntu:24.04", "ami": "ami-0a116fa7c861dd5f9", "image_type": "ami"},
			want:  config{ami: "ami-0a116fa7c861dd5f9", amiField: "extra.ami"},
		},
		{
			name: "lookup, and everything else",
			extra: map[string]any{
				"image": "ubuntu:24.04", "ami_lookup": map[string]any{"name": "ubuntu/*-24.04-*", "owner": "099720109477", "architecture": "arm64"},
				"cpu": 2, "memoryMB": "2048", "subnet": "subnet-1", "security_groups": []any{"sg-1", "web"},
				"key_name": "ops", "user_data": "#!/bin/sh\n", "spot": true, "max_price": 0.05,
				"tags": map[string]any{"team": "infra", "cost": 7},
			},
			want: config{
				amiField: "extra.ami", lookup: &amiLookup{name: "ubuntu/*-24.04-*", owner: "099720109477", arch: "arm64"},
				cpu: 2, memoryMB: 2048, subnet: "subnet-1", groupIDs: []string{"sg-1"}, groupNames: []string{"web"},
				keyName: "ops", userData: "#!/bin/sh\n", spot: true, maxPrice: "0.05",
				tags: map[string]string{"team": "infra", "cost": "7"},
			},
		},
		{
			name:  "one security group as a string, hibernation",
			extra: map[string]any{"ami": "ami-01234567", "security_groups": "sg-9", "hibernation": true, "instance_type": "m7g.large"},
			want:  config{ami: "ami-01234567", amiField: "extra.ami", groupIDs: []string{"sg-9"}, hibernation: true, instanceType: "m7g.large"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			provisiontest.CheckParsed(t, parseExtra, tc.extra, tc.want, cmp.AllowUnexported(config{}, amiLookup{}))
		})
	}
}

func TestParseExtraErrors(t *testing.T) {
	ami := "ami-0123456789abcdef0"
	tests := []struct {
		extra map[string]any
		field string
	}{
		{map[string]any{}, "extra.ami"},
		{map[string]any{"image": "ubuntu:24.04"}, "extra.image"},
		{map[string]any{"ami": "ami-xyz"}, "extra.ami"},
		{map[string]any{"ami": ami, "image_type": "iso"}, "extra.image_type"},
		{map[string]any{"ami_lookup": "ubuntu"}, "extra.ami_lookup"},
		{map[string]any{"ami_lookup": map[string]any{"owner": "amazon"}}, "extra.ami_lookup.name"},
		{map[string]any{"ami_lookup": map[string]any{"name": "x", "owner": "amazon", "architecture": "riscv64"}}, "extra.ami_lookup.architecture"},
		{map[string]any{"ami_lookup": map[string]any{"name": "x", "owner": "amazon", "arch": "arm64"}}, "extra.ami_lookup.arch"},
		{map[string]any{"ami": ami, "instance_type": "T3 Micro"}, "extra.instance_type"},
		{map[string]any{"ami": ami, "memoryMB": -1}, "extra.memoryMB"},
		{map[string]any{"ami": ami, "subnet": "vpc-1"}, "extra.subnet"},
		{map[string]any{"ami": ami, "security_groups": []any{""}}, "extra.security_groups[0]"},
		{map[string]any{"ami": ami, "key_name": []any{}}, "extra.key_name"},
		{map[string]any{"ami": ami, "spot": 1}, "extra.spot"},
		{map[string]any{"ami": ami, "spot": true, "max_price": "cheap"}, "extra.max_price"},
		{map[string]any{"ami": ami, "spot": true, "max_price": 0}, "extra.max_price"},
		{map[string]any{"ami": ami, "max_price": "0.1"}, "extra.max_price"},
		{map[string]any{"ami": ami, "hibernation": "yes"}, "extra.hibernation"},
		{map[string]any{"ami": ami, "hibernation": true, "spot": true}, "extra.hibernation"},
		{map[string]any{"ami": ami, "tags": []any{"a"}}, "extra.tags"},
		{map[string]any{"ami": ami, "tags": map[string]any{"x": strings.Repeat("v", 257)}}, "extra.tags.x"},
		{map[string]any{"ami": ami, "user_data": strings.Repeat("x", maxUserData+1)}, "extra.user_data"},
	}
	for _, tc := range tests {
		_, err := parseExtra(tc.extra)
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("parseExtra(%.80v) = %v, want a field error for %s", tc.extra, err, tc.field)
		}
	}
}

func TestChooseType(t *testing.T) {
	tests := []struct {
		arch          string
		cpu, memoryMB float64
		want          string
	}{
		{archX86, 0, 0, "t3.nano"},
		{archX86, 1, 600, "t3.micro"},
		{archX86, 2, 2048, "t3.small"},
		{archX86, 2, 3000, "t3.medium"},
		{archX86, 4, 4096, "t3.xlarge"},
		{archX86, 16, 8192, "c6i.4xlarge"},
		{archX86, 8, 65536, "r6i.2xlarge"},
		{archX86, 64, 512 << 10, "r6i.16xlarge"},
		{archARM, 0.5, 0, "t4g.nano"},
		{archARM, 32, 1024, "c7g.8xlarge"},
	}
	for _, tc := range tests {
		got, err := chooseType(tc.arch, tc.cpu, tc.memoryMB)
		if err != nil || got.name != tc.want {
			t.Errorf("chooseType(%s, %v, %v) = %v, %v, want %s", tc.arch, tc.cpu, tc.memoryMB, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		arch          string
		cpu, memoryMB float64
	}{{archX86, 65, 0}, {archARM, 2, 1 << 20}, {"i386", 1, 0}} {
		_, err := chooseType(tc.arch, tc.cpu, tc.memoryMB)
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) || fe.Field != "extra.instance_type" {
			t.Errorf("chooseType(%s, %v, %v) = %v, want a field error for extra.instance_type", tc.arch, tc.cpu, tc.memoryMB, err)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		code  string
		fault smithy.ErrorFault
		class error
	}{
		{"InvalidInstanceID.NotFound", smithy.FaultClient, errdefs.ErrNotFound},
		{"InvalidAMIID.NotFound", smithy.FaultClient, errdefs.ErrNotFound},
		{"InvalidParameterValue", smithy.FaultClient, errdefs.ErrInvalid},
		{"UnsupportedOperation", smithy.FaultClient, errdefs.ErrInvalid},
		{"UnsupportedHibernationConfiguration", smithy.FaultClient, errdefs.ErrInvalid},
		{"IncorrectInstanceState", smithy.FaultClient, errdefs.ErrConflict},
		{"IdempotentParameterMismatch", smithy.FaultClient, errdefs.ErrConflict},
		{"InsufficientInstanceCapacity", smithy.FaultServer, provision.ErrNoCapacity},
		{"InsufficientInstanceCapacity", smithy.FaultServer, errdefs.ErrUnavailable},
		{"MaxSpotInstanceCountExceeded", smithy.FaultClient, provision.ErrNoCapacity},
		{"capacity-not-available", smithy.FaultServer, provision.ErrNoCapacity},
		{"VcpuLimitExceeded", smithy.FaultClient, provision.ErrNoCapacity},
		{"VcpuLimitExceeded", smithy.FaultClient, errdefs.ErrUnavailable},
		{"RequestLimitExceeded", smithy.FaultClient, errdefs.ErrUnavailable},
		{"SomethingNew", smithy.FaultServer, errdefs.ErrUnavailable},
		{"UnauthorizedOperation", smithy.FaultClient, errdefs.ErrPermission},
		{"AuthFailure", smithy.FaultClient, errdefs.ErrPermission},
	}
	for _, tc := range tests {
		err := classify(&smithy.GenericAPIError{Code: tc.code, Message: "says EC2", Fault: tc.fault})
		if !errors.Is(err, tc.class) || err.Error() != tc.code+": says EC2" {
			t.Errorf("classify(%s) = %q, want class %v", tc.code, err, tc.class)
		}
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != tc.code {
			t.Errorf("classify(%s) lost the SDK's error", tc.code)
		}
	}
	if err := classify(errors.New("dial tcp: connection refused")); !errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, provision.ErrNoCapacity) {
		t.Errorf("classify(network error) = %v, want unavailable, not no capacity", err)
	}
	for _, code := range []string{"RequestLimitExceeded", "InternalError", "SomethingNew"} {
		if err := classify(&smithy.GenericAPIError{Code: code, Fault: smithy.FaultServer}); errors.Is(err, provision.ErrNoCapacity) {
			t.Errorf("classify(%s) is no capacity, want a plain unavailable: retrying may help", code)
		}
	}
}

// TestNoCapacityReason: an instance that ended while launching for want
// of capacity says so in its state reason's code.
func TestNoCapacityReason(t *testing.T) {
	tests := []struct {
		code string
		want bool
	}{
		{"Server.InsufficientInstanceCapacity", true},
		{"InsufficientInstanceCapacity", true},
		{"Server.SpotInstanceTermination", false},
		{"Client.UserInitiatedShutdown", false},
		{"", false},
	}
	for _, tc := range tests {
		if got := noCapacity(tc.code); got != tc.want {
			t.Errorf("noCapacity(%q) = %v, want %v", tc.code, got, tc.want)
		}
	}
}

func TestNewSettings(t *testing.T) {
	ec2test.Env(t)
	tests := []struct {
		settings map[string]string
		field    string
	}{
		{map[string]string{"zone": "a"}, "settings.zone"},
		{map[string]string{"endpoint": "localhost:4566"}, "settings.endpoint"},
		{map[string]string{"address": "elastic"}, "settings.address"},
		{map[string]string{"poll_interval": "often"}, "settings.poll_interval"},
		{map[string]string{"wait_timeout": "-1s"}, "settings.wait_timeout"},
		{map[string]string{"request_timeout": "0s"}, "settings.request_timeout"},
	}
	for _, tc := range tests {
		_, err := New(tc.settings)
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("New(%v) = %v, want a field error for %s", tc.settings, err, tc.field)
		}
	}
	a, err := New(map[string]string{"region": "eu-west-1", "address": "private", "poll_interval": "1s"})
	if err != nil || a.Region() != "eu-west-1" || !a.private || a.pollInterval.Seconds() != 1 {
		t.Errorf("New = %+v, %v", a, err)
	}
	if a, err := New(nil); err != nil || a.Region() != ec2test.Region {
		t.Errorf("New(nil) = %v, %v, want the region of AWS_REGION", a, err)
	}
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	var fe *errdefs.FieldError
	if _, err := New(nil); !errors.As(err, &fe) || fe.Field != "settings.region" {
		t.Errorf("New without a region = %v, want a field error for settings.region", err)
	}
}

func TestClientToken(t *testing.T) {
	a := clientToken(launchKeyOf("web-1", map[string]string{labelDeploymentID: "dep-1"}))
	b := clientToken(launchKeyOf("web-2", map[string]string{labelDeploymentID: "dep-1"}))
	c := clientToken(launchKeyOf("web-1", nil))
	if a != b {
		t.Errorf("the same deployment ID gave tokens %q and %q", a, b)
	}
	if a == c {
		t.Errorf("a deployment ID and a name gave the same token %q", a)
	}
	if len(a) > 64 {
		t.Errorf("token %q is longer than EC2's 64", a)
	}
}

// TestMachineArch: the scheduler's arch filter reads an instance's arch
// from its instance type, else its AMI lookup.
func TestMachineArch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  string
	}{
		{"x86 type", map[string]any{"instance_type": "m5.large"}, "x86_64"},
		{"graviton type", map[string]any{"instance_type": "t4g.small"}, "arm64"},
		{"graviton with disk and network", map[string]any{"instance_type": "c6gdn.xlarge"}, "arm64"},
		{"x86 gpu type", map[string]any{"instance_type": "g5.xlarge"}, "x86_64"},
		{"graviton gpu type", map[string]any{"instance_type": "g5g.xlarge"}, "arm64"},
		{"first graviton", map[string]any{"instance_type": "a1.medium"}, "arm64"},
		{"lookup, default arch", map[string]any{"ami_lookup": map[string]any{"name": "al2023-*", "owner": "amazon"}}, "x86_64"},
		{"lookup, arm64", map[string]any{"ami_lookup": map[string]any{"name": "al2023-*", "owner": "amazon", "architecture": "arm64"}}, "arm64"},
		{"an AMI ID alone", map[string]any{"ami": "ami-0123456789abcdef0"}, ""},
	} {
		if got := (*AWS)(nil).MachineArch(tc.extra); got != tc.want {
			t.Errorf("%s: MachineArch(%v) = %q, want %q", tc.name, tc.extra, got, tc.want)
		}
	}
}

// EC2 machines take nodemgr's bootstrap user data unless the template
// gives its own or asks for bootstrap: push; what is too large for EC2 is
// refused before a launch.
func TestPullBootstrapUserData(t *testing.T) {
	a := &AWS{}
	for _, tc := range []struct {
		extra map[string]any
		want  bool
	}{
		{map[string]any{"ami": "ami-1"}, true},
		{map[string]any{"ami": "ami-1", "user_data": "#!/bin/sh\n"}, false},
		{map[string]any{"ami": "ami-1", provision.ExtraBootstrap: "push"}, false},
	} {
		if got := a.PullBootstrap(tc.extra); got != tc.want {
			t.Errorf("PullBootstrap(%v) = %v, want %v", tc.extra, got, tc.want)
		}
	}
	var c config
	if err := c.takeUserData("#cloud-config\n"); err != nil || c.userData != "#cloud-config\n" {
		t.Errorf("takeUserData = %v, %q", err, c.userData)
	}
	if err := (&config{}).takeUserData(strings.Repeat("x", maxUserData+1)); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("takeUserData of %d bytes = %v; want too large", maxUserData+1, err)
	}
	if _, err := parseExtra(map[string]any{"ami": "ami-1", provision.ExtraBootstrap: "ssh"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("bootstrap: ssh = %v; want a field error", err)
	}
}

// An EC2 endpoint that takes connections and never answers fails a call
// within the request timeout (the SDK's tries of it included), so the
// launch can move on, instead of holding it until its own limit.
func TestSilentEndpointFailsTheCall(t *testing.T) {
	ec2test.Env(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	a, err := New(map[string]string{"endpoint": "http://" + ln.Addr().String(), "request_timeout": "200ms"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = a.Provision(ctx, provision.Spec{Name: "silent", Extra: map[string]any{"ami": ec2test.ImageAL2023, "instance_type": "t3.nano"}})
	if err == nil || ctx.Err() != nil {
		t.Errorf("Provision against a silent endpoint = %v (context: %v); want the call to fail by its request timeout", err, ctx.Err())
	}
}
