package blobtest

import (
	"context"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodemgr/nodemgr/internal/coordinator/blob"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
)

// MotoS3 returns the configuration of an empty bucket in the test
// binary's moto server, which serves S3 beside EC2 on one port. It is
// ec2test.StartMoto's server: started on first use, reset on every call
// (so tests that use it do not run in parallel), and where moto cannot
// run the test is skipped, or fails when NODEMGR_REQUIRE_MOTO=1. Call
// StopMoto from TestMain.
func MotoS3(t *testing.T) blob.S3Config {
	t.Helper()
	m := ec2test.StartMoto(t)
	cfg := blob.S3Config{
		Bucket:    "nodemgr-blobs",
		Prefix:    "blobs/",
		Region:    ec2test.Region,
		Endpoint:  m.URL,
		PathStyle: true,
		TempDir:   t.TempDir(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := S3Client(t, cfg).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &cfg.Bucket}); err != nil {
		t.Fatalf("create bucket %s in moto: %v", cfg.Bucket, err)
	}
	return cfg
}

// StopMoto stops the moto server MotoS3 started, if it did.
func StopMoto() { ec2test.StopMoto() }

// S3Client returns a plain SDK client for cfg's endpoint, to check a
// store's work or to go behind its back.
func S3Client(t *testing.T, cfg blob.S3Config) *s3.Client {
	t.Helper()
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRegion(cfg.Region))
	if err != nil {
		t.Fatalf("load AWS configuration: %v", err)
	}
	return s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.BaseEndpoint = awssdk.String(cfg.Endpoint)
		o.UsePathStyle = cfg.PathStyle
		o.ResponseChecksumValidation = awssdk.ResponseChecksumValidationWhenRequired
	})
}
