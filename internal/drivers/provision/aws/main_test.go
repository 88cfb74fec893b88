package aws_test

import (
	"context"
	"os"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
)

func TestMain(m *testing.M) {
	code := m.Run()
	ec2test.StopMoto()
	os.Exit(code)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// rawClient is a plain SDK client for the endpoint, to check the
// provider's work with.
func rawClient(t *testing.T, endpoint string) *ec2.Client {
	t.Helper()
	cfg, err := awsconfig.LoadDefaultConfig(ctxFor(t), awsconfig.WithRegion(ec2test.Region))
	if err != nil {
		t.Fatal(err)
	}
	return ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = awssdk.String(endpoint) })
}

// instances lists the instances that carry all the labels as tags and
// are not terminated or on their way there.
func instances(t *testing.T, c *ec2.Client, labels map[string]string) []types.Instance {
	t.Helper()
	filters := []types.Filter{{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}}}
	for k, v := range labels {
		filters = append(filters, types.Filter{Name: awssdk.String("tag:" + k), Values: []string{v}})
	}
	out, err := c.DescribeInstances(ctxFor(t), &ec2.DescribeInstancesInput{Filters: filters})
	if err != nil {
		t.Fatalf("DescribeInstances: %v", err)
	}
	var insts []types.Instance
	for _, r := range out.Reservations {
		insts = append(insts, r.Instances...)
	}
	return insts
}

func ids(insts []types.Instance) []string {
	var out []string
	for _, i := range insts {
		out = append(out, awssdk.ToString(i.InstanceId)+" "+string(i.State.Name))
	}
	return out
}
