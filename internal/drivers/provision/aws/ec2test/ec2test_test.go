package ec2test_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
)

// client is the real SDK, talking to a new fake.
func client(t *testing.T) (*ec2.Client, *ec2test.Server) {
	t.Helper()
	srv := ec2test.New(t)
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := ec2.NewFromConfig(cfg, func(o *ec2.Options) {
		o.BaseEndpoint = awssdk.String(srv.URL)
		o.RetryMaxAttempts = 1
	})
	return c, srv
}

func run(t *testing.T, c *ec2.Client, in *ec2.RunInstancesInput) types.Instance {
	t.Helper()
	if in.MinCount == nil {
		in.MinCount, in.MaxCount = awssdk.Int32(1), awssdk.Int32(1)
	}
	if in.ImageId == nil {
		in.ImageId = awssdk.String(ec2test.ImageAL2023)
	}
	out, err := c.RunInstances(context.Background(), in)
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	return out.Instances[0]
}

func describe(t *testing.T, c *ec2.Client, id string) types.Instance {
	t.Helper()
	out, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil || len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
		t.Fatalf("DescribeInstances(%s) = %v, %v", id, out, err)
	}
	return out.Reservations[0].Instances[0]
}

// code returns the EC2 error code of err.
func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func TestRunAndDescribe(t *testing.T) {
	c, _ := client(t)
	inst := run(t, c, &ec2.RunInstancesInput{
		InstanceType: "t3.micro", ClientToken: awssdk.String("tok-1"), KeyName: awssdk.String("ops"),
		TagSpecifications:  []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: []types.Tag{{Key: awssdk.String("Name"), Value: awssdk.String("web")}}}},
		HibernationOptions: &types.HibernationOptionsRequest{Configured: awssdk.Bool(true)},
	})
	got := describe(t, c, awssdk.ToString(inst.InstanceId))
	if got.State.Name != types.InstanceStateNameRunning || got.InstanceType != "t3.micro" || awssdk.ToString(got.KeyName) != "ops" ||
		!awssdk.ToBool(got.HibernationOptions.Configured) || got.Architecture != types.ArchitectureValuesX8664 ||
		len(got.Tags) != 1 || awssdk.ToString(got.Tags[0].Value) != "web" || awssdk.ToString(got.PublicIpAddress) == "" || got.LaunchTime == nil {
		t.Errorf("DescribeInstances = %+v", got)
	}

	// The same token is the same instance; other arguments with it are refused.
	again := run(t, c, &ec2.RunInstancesInput{InstanceType: "t3.micro", ClientToken: awssdk.String("tok-1")})
	if awssdk.ToString(again.InstanceId) != awssdk.ToString(inst.InstanceId) {
		t.Errorf("RunInstances with the same token = %s, want %s", awssdk.ToString(again.InstanceId), awssdk.ToString(inst.InstanceId))
	}
	_, err := c.RunInstances(context.Background(), &ec2.RunInstancesInput{ImageId: awssdk.String(ec2test.ImageAL2023), InstanceType: "m5.large",
		MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), ClientToken: awssdk.String("tok-1")})
	if code(err) != "IdempotentParameterMismatch" {
		t.Errorf("RunInstances with the same token, another type = %v, want IdempotentParameterMismatch", err)
	}

	filtered, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: awssdk.String("tag:Name"), Values: []string{"w*"}},
		{Name: awssdk.String("instance-state-name"), Values: []string{"running"}},
	}})
	if err != nil || len(filtered.Reservations) != 1 {
		t.Errorf("DescribeInstances(tag:Name=w*) = %+v, %v, want the instance", filtered, err)
	}
	if _, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{"i-0123456789abcdef0"}}); code(err) != "InvalidInstanceID.NotFound" {
		t.Errorf("DescribeInstances(unknown) = %v, want InvalidInstanceID.NotFound", err)
	}
	if _, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{Filters: []types.Filter{{Name: awssdk.String("vpc-id"), Values: []string{"x"}}}}); code(err) != "InvalidParameterValue" {
		t.Errorf("DescribeInstances(a filter the fake does not know) = %v, want InvalidParameterValue", err)
	}
	if _, err := c.RunInstances(context.Background(), &ec2.RunInstancesInput{ImageId: awssdk.String("ami-0000000f"), MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1)}); code(err) != "InvalidAMIID.NotFound" {
		t.Errorf("RunInstances(unknown AMI) = %v, want InvalidAMIID.NotFound", err)
	}
}

func TestDescribeImages(t *testing.T) {
	c, _ := client(t)
	out, err := c.DescribeImages(context.Background(), &ec2.DescribeImagesInput{
		Owners:  []string{"amazon"},
		Filters: []types.Filter{{Name: awssdk.String("name"), Values: []string{"al2023-ami-*-x86_64"}}, {Name: awssdk.String("architecture"), Values: []string{"x86_64"}}},
	})
	if err != nil || len(out.Images) != 2 {
		t.Fatalf("DescribeImages = %+v, %v, want the two x86_64 AL2023 images", out, err)
	}
	for _, img := range out.Images {
		if awssdk.ToString(img.CreationDate) == "" || img.Architecture != "x86_64" || awssdk.ToString(img.OwnerId) != "137112412989" {
			t.Errorf("image %+v", img)
		}
	}
	if out, err := c.DescribeImages(context.Background(), &ec2.DescribeImagesInput{Owners: []string{"self"}}); err != nil || len(out.Images) != 1 {
		t.Errorf("DescribeImages(self) = %+v, %v, want the account's one image", out, err)
	}
}

// TestLifecycleRules: what EC2 refuses, the fake refuses with EC2's codes.
func TestLifecycleRules(t *testing.T) {
	c, srv := client(t)
	// Long enough that a loaded machine (CI runs packages side by side)
	// still sees pending and stopping; the waits below poll, not sleep.
	srv.SetDelay(time.Second)
	ctx := context.Background()
	plain := awssdk.ToString(run(t, c, &ec2.RunInstancesInput{InstanceType: "t3.micro"}).InstanceId)
	spot := awssdk.ToString(run(t, c, &ec2.RunInstancesInput{InstanceType: "t3.micro",
		InstanceMarketOptions: &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot}}).InstanceId)

	if st := describe(t, c, plain).State.Name; st != types.InstanceStateNamePending {
		t.Errorf("right after launch: %s, want pending", st)
	}
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{plain}}); code(err) != "IncorrectInstanceState" {
		t.Errorf("StopInstances(pending) = %v, want IncorrectInstanceState", err)
	}
	if st := waitState(t, c, plain, types.InstanceStateNameRunning); st != types.InstanceStateNameRunning {
		t.Errorf("after the delay: %s, want running", st)
	}
	if got := describe(t, c, spot).InstanceLifecycle; got != types.InstanceLifecycleTypeSpot {
		t.Errorf("spot instance's lifecycle = %q, want spot", got)
	}

	tests := []struct {
		name string
		call func() error
		code string
	}{
		{"hibernate without hibernation", func() error {
			_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{plain}, Hibernate: awssdk.Bool(true)})
			return err
		}, "UnsupportedHibernationConfiguration"},
		{"stop a one-time spot instance", func() error {
			_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{spot}})
			return err
		}, "UnsupportedOperation"},
	}
	for _, tc := range tests {
		if err := tc.call(); code(err) != tc.code {
			t.Errorf("%s = %v, want %s", tc.name, err, tc.code)
		}
	}

	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{plain}}); err != nil {
		t.Fatalf("StopInstances: %v", err)
	}
	if got := describe(t, c, plain); got.State.Name != types.InstanceStateNameStopping || awssdk.ToString(got.StateReason.Code) != "Client.UserInitiatedShutdown" {
		t.Errorf("after StopInstances: %s (%v), want stopping by the user", got.State.Name, got.StateReason)
	}
	if _, err := c.RebootInstances(ctx, &ec2.RebootInstancesInput{InstanceIds: []string{plain}}); code(err) != "IncorrectInstanceState" {
		t.Errorf("RebootInstances(stopping) = %v, want IncorrectInstanceState", err)
	}

	if err := srv.InterruptSpot(spot); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, spot, types.InstanceStateNameTerminated)
	got := describe(t, c, spot)
	if got.State.Name != types.InstanceStateNameTerminated || awssdk.ToString(got.StateReason.Code) != "Server.SpotInstanceTermination" {
		t.Errorf("after InterruptSpot: %s (%v), want terminated with Server.SpotInstanceTermination", got.State.Name, got.StateReason)
	}
}

func TestInsufficientCapacity(t *testing.T) {
	c, srv := client(t)
	srv.NoCapacity("p5.48xlarge")
	_, err := c.RunInstances(context.Background(), &ec2.RunInstancesInput{ImageId: awssdk.String(ec2test.ImageAL2023), InstanceType: "p5.48xlarge", MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1)})
	var re *awshttp.ResponseError
	if code(err) != "InsufficientInstanceCapacity" || !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusInternalServerError {
		t.Errorf("RunInstances = %v, want InsufficientInstanceCapacity, a server error (500)", err)
	}
	if len(srv.Instances()) != 0 {
		t.Errorf("instances = %v, want none", srv.Instances())
	}
}

// TestUnsigned: a request without a SigV4 signature is refused as EC2
// does, with its error XML.
func TestUnsigned(t *testing.T) {
	srv := ec2test.New(t)
	resp, err := http.PostForm(srv.URL, url.Values{"Action": {"DescribeInstances"}, "Version": {"2016-11-15"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "<Code>AuthFailure</Code>") {
		t.Errorf("unsigned DescribeInstances = %s %s, want 401 AuthFailure", resp.Status, body)
	}
}

// waitState polls the instance until it is in state want, for 10 s at
// most, and returns the state it saw last.
func waitState(t *testing.T, c *ec2.Client, id string, want types.InstanceStateName) types.InstanceStateName {
	t.Helper()
	var st types.InstanceStateName
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st = describe(t, c, id).State.Name; st == want {
			break
		}
	}
	return st
}
