package aws

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/internal/drivers/provision/records"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Tags nodemgr puts on every instance it makes, besides the spec's labels.
const (
	TagName       = "Name"               // the machine name, as the EC2 console shows it
	TagDeployment = "nodemgr.deployment" // the machine name
	TagTemplate   = "nodemgr.template"
)

// labelDeploymentID is the orchestrator's label that holds the
// deployment's ID (internal/coordinator/orchestrate.LabelDeploymentID): the launch's
// idempotency key when present.
const labelDeploymentID = "nodemgr.deployment-id"

// Capabilities of an aws deployment.
const (
	CapExec  = "exec:ssh"
	CapSFTP  = "copy:sftp"
	CapRsync = "copy:rsync"
)

// cleanupTimeout bounds the termination of an instance whose launch
// failed, which runs even when the caller's context is done.
const cleanupTimeout = time.Minute

func init() {
	d := records.AWS
	d.New = func(settings map[string]string) (provision.Provider, error) { return New(settings) }
	provision.Register(d)
}

// ec2API is the part of *ec2.Client the provider uses.
type ec2API interface {
	RunInstances(context.Context, *ec2.RunInstancesInput, ...func(*ec2.Options)) (*ec2.RunInstancesOutput, error)
	DescribeInstances(context.Context, *ec2.DescribeInstancesInput, ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeImages(context.Context, *ec2.DescribeImagesInput, ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
	StartInstances(context.Context, *ec2.StartInstancesInput, ...func(*ec2.Options)) (*ec2.StartInstancesOutput, error)
	StopInstances(context.Context, *ec2.StopInstancesInput, ...func(*ec2.Options)) (*ec2.StopInstancesOutput, error)
	RebootInstances(context.Context, *ec2.RebootInstancesInput, ...func(*ec2.Options)) (*ec2.RebootInstancesOutput, error)
	TerminateInstances(context.Context, *ec2.TerminateInstancesInput, ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// AWS provisions EC2 instances in one region.
type AWS struct {
	ec2          ec2API
	region       string
	private      bool // address: the private IP even when there is a public one
	pollInterval time.Duration
	waitTimeout  time.Duration
}

// DefaultRequestTimeout bounds one EC2 API request (the SDK retries a
// timed-out one); the request_timeout setting changes it.
const DefaultRequestTimeout = 20 * time.Second

// New returns a provider for the region and credentials that settings
// and the standard AWS environment give (see the package doc). It reads
// the shared config files but does not contact AWS.
func New(settings map[string]string) (*AWS, error) {
	a := &AWS{pollInterval: 5 * time.Second, waitTimeout: 10 * time.Minute}
	var opts []func(*awsconfig.LoadOptions) error
	var endpoint string
	requestTimeout := DefaultRequestTimeout
	for k, v := range settings {
		switch k {
		case "region":
			if v != "" {
				opts = append(opts, awsconfig.WithRegion(v))
			}
		case "profile":
			if v != "" {
				opts = append(opts, awsconfig.WithSharedConfigProfile(v))
			}
		case "endpoint":
			if v != "" && !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
				return nil, errdefs.Field("settings.endpoint", "%q is not an http:// or https:// URL", v)
			}
			endpoint = v
		case "address":
			switch v {
			case "", "public":
			case "private":
				a.private = true
			default:
				return nil, errdefs.Field("settings.address", "%q is not public or private", v)
			}
		case "poll_interval", "wait_timeout", "request_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, errdefs.Field("settings."+k, "%q is not a positive duration such as 5s", v)
			}
			switch k {
			case "poll_interval":
				a.pollInterval = d
			case "wait_timeout":
				a.waitTimeout = d
			default:
				requestTimeout = d
			}
		default:
			return nil, errdefs.Field("settings."+k, "unknown aws provider setting; known: region, endpoint, profile, address, poll_interval, wait_timeout, request_timeout")
		}
	}
	// An endpoint that takes connections and never answers must fail a
	// call, not hold it (and the pool machine waiting on it) until the
	// launch's own limit: the SDK's client has no timeout of its own.
	opts = append(opts, awsconfig.WithHTTPClient(awshttp.NewBuildableClient().WithTimeout(requestTimeout)))
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("aws provider: load the AWS configuration: %w", errdefs.Class(err, errdefs.ErrInvalid))
	}
	if cfg.Region == "" {
		return nil, errdefs.Field("settings.region", "no region: set it, or AWS_REGION, or a region in the AWS profile")
	}
	a.region = cfg.Region
	a.ec2 = ec2.NewFromConfig(cfg, func(o *ec2.Options) {
		if endpoint != "" {
			o.BaseEndpoint = awssdk.String(endpoint)
		}
		if r, ok := o.Retryer.(awssdk.RetryerV2); ok {
			o.Retryer = capacityNotRetried{r}
		}
	})
	return a, nil
}

// capacityNotRetried keeps the SDK from retrying a launch EC2 refused for
// want of capacity: it answers with a server fault, which the SDK would
// retry at once, to the same answer.
type capacityNotRetried struct{ awssdk.RetryerV2 }

func (r capacityNotRetried) IsErrorRetryable(err error) bool {
	if slices.Contains(capacityCodes, errorCode(err)) {
		return false
	}
	return r.RetryerV2.IsErrorRetryable(err)
}

// Name is "aws".
func (a *AWS) Name() string { return "aws" }

// MachineArch is the arch an instance of this Extra gets, read without
// calling EC2: its instance type's (a Graviton family, such as t4g or
// m7gd, is arm64), else its ami_lookup's architecture (x86_64 when not
// given); "" when only an AMI ID says.
func (a *AWS) MachineArch(extra map[string]any) string {
	if it, _ := extra["instance_type"].(string); it != "" {
		return instanceArch(it)
	}
	if l, err := parseLookup(extra); err == nil && l != nil {
		return l.arch
	}
	return ""
}

// instanceArch is an instance type's arch by its family: Graviton
// families carry a g after their generation (t4g, m6gd, c7gn, g5g), and
// a1 was the first.
func instanceArch(instanceType string) string {
	family, _, _ := strings.Cut(instanceType, ".")
	if family == "a1" {
		return archARM
	}
	i := strings.IndexAny(family, "0123456789")
	if i < 0 {
		return ""
	}
	if strings.Contains(strings.TrimLeft(family[i:], "0123456789"), "g") {
		return archARM
	}
	return archX86
}

// PullBootstrap says yes unless the template gives user data of its own
// or asks for bootstrap: push: EC2's images run cloud-init on the user
// data, and its machines answer SSH only tens of seconds after they run.
func (a *AWS) PullBootstrap(extra map[string]any) bool {
	ud, _ := extra["user_data"].(string)
	how, _ := extra[provision.ExtraBootstrap].(string)
	return ud == "" && how != "push"
}

// Region is the region the provider launches in.
func (a *AWS) Region() string { return a.region }

// Provision launches an instance and returns once EC2 reports it running.
// A retried call with the same deployment ID finds the instance the first
// one launched instead of launching another. On error the instance, if
// one was launched, is terminated.
func (a *AWS) Provision(ctx context.Context, spec provision.Spec) (provision.Deployment, error) {
	cfg, err := parseExtra(spec.Extra)
	if err != nil {
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", spec.Name, err)
	}
	if err := cfg.takeUserData(spec.UserData); err != nil {
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", spec.Name, err)
	}
	name := spec.NameOrRandom()
	if len(name) > 256 {
		return provision.Deployment{}, errdefs.Field("name", "%q is longer than an EC2 tag value (256)", name)
	}
	tags := map[string]string{}
	maps.Copy(tags, cfg.tags)
	maps.Copy(tags, spec.Labels)
	tags[TagName] = name
	tags[TagDeployment] = name
	tags[TagTemplate] = spec.Template
	key := launchKeyOf(name, spec.Labels)
	tags[key.tag] = key.value
	if len(tags) > 50 {
		return provision.Deployment{}, errdefs.Field("extra.tags", "the instance would carry %d tags (extra.tags, the spec's labels and nodemgr's own); EC2 takes 50", len(tags))
	}

	var chosen string
	inst, err := a.launched(ctx, key)
	if err != nil {
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", name, err)
	}
	if inst == nil {
		p, err := a.plan(ctx, cfg)
		if err != nil {
			return provision.Deployment{}, fmt.Errorf("provision %s: %w", name, err)
		}
		chosen = p.chosen
		in := runInput(cfg, p, tags, clientToken(key))
		out, err := a.ec2.RunInstances(ctx, in)
		if err == nil && len(out.Instances) != 1 {
			err = fmt.Errorf("RunInstances returned %d instances, want 1", len(out.Instances))
		}
		if err != nil {
			if ctx.Err() != nil {
				// The launch may have happened all the same.
				a.abandon(ctx, key)
			}
			return provision.Deployment{}, fmt.Errorf("provision %s: %w", name, launchError(classify(err), p))
		}
		inst = &out.Instances[0]
	}

	id := awssdk.ToString(inst.InstanceId)
	dep, err := a.awaitRunning(ctx, id)
	if errors.Is(err, errStopped) {
		// EC2 answered a repeated token with an instance launched
		// earlier and stopped since: someone else's decision to undo.
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", name, err)
	}
	if err != nil {
		err = provision.Undo(ctx, cleanupTimeout, err, "terminating instance "+id, func(ctx context.Context) error {
			return a.terminate(ctx, id)
		})
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", name, err)
	}
	dep.Template = spec.Template
	dep.Extra = maps.Clone(spec.Extra)
	if dep.Extra == nil {
		dep.Extra = map[string]any{}
	}
	dep.Extra["ami"] = dep.image
	dep.Extra["instance_type"] = dep.instanceType
	if ud, ok := dep.Extra["user_data"].(string); ok && ud != "" {
		// The bootstrap may hold a secret, and a deployment's Extra is
		// stored and shown: keep only what identifies it.
		sum := sha256.Sum256([]byte(ud))
		dep.Extra["user_data"] = fmt.Sprintf("(%d bytes, sha256 %x)", len(ud), sum[:8])
	}
	if chosen != "" {
		dep.Extra["chosen"] = chosen
	}
	return dep.Deployment, nil
}

// launchKey identifies a launch, and the tag that finds its instance:
// the deployment's ID when the spec has one, else the machine name.
type launchKey struct {
	tag, value string
}

// launchKeyOf finds the deployment's ID in the orchestrator's label
// (nodemgr.deployment-id) or the server's (nodemgr.deployment, which the
// resource then carries as nodemgr.deployment-id, since its own
// nodemgr.deployment tag is the machine name). Names are not unique on
// EC2: without an ID, two launches of one name are one machine.
func launchKeyOf(name string, labels map[string]string) launchKey {
	if id := labels[labelDeploymentID]; id != "" {
		return launchKey{labelDeploymentID, id}
	}
	if id := labels[TagDeployment]; id != "" && id != name {
		return launchKey{labelDeploymentID, id}
	}
	return launchKey{TagDeployment, name}
}

// clientToken is RunInstances' idempotency token for a launch: EC2 makes
// one instance for any number of calls with the same token. It is derived
// from the launch key, within EC2's 64 ASCII characters.
func clientToken(k launchKey) string {
	sum := sha256.Sum256([]byte(k.tag + "=" + k.value))
	return "nodemgr-" + hex.EncodeToString(sum[:20])
}

// launched returns the pending or running instance a previous call for
// the same launch made, if any.
func (a *AWS) launched(ctx context.Context, k launchKey) (*types.Instance, error) {
	found, err := a.describeFiltered(ctx, []types.Filter{
		{Name: awssdk.String("tag:" + k.tag), Values: []string{k.value}},
		{Name: awssdk.String("tag-key"), Values: []string{TagDeployment}},
		{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running"}},
	})
	if err != nil || len(found) == 0 {
		return nil, err
	}
	return &found[0], nil
}

// abandon terminates whatever a launch that was cut off made after all.
func (a *AWS) abandon(ctx context.Context, k launchKey) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if inst, err := a.launched(cctx, k); err == nil && inst != nil {
		a.terminate(cctx, awssdk.ToString(inst.InstanceId))
	}
}

// plan is what a launch resolved from the Extra: the AMI and the
// instance type, and a sentence on what it chose.
type plan struct {
	ami, arch, instanceType string
	chosen                  string
	amiField                string
}

func (a *AWS) plan(ctx context.Context, cfg config) (plan, error) {
	p := plan{ami: cfg.ami, amiField: cfg.amiField, instanceType: cfg.instanceType}
	var notes []string
	if cfg.lookup != nil {
		img, n, err := a.lookupImage(ctx, *cfg.lookup)
		if err != nil {
			return p, err
		}
		p.ami, p.arch, p.amiField = awssdk.ToString(img.ImageId), string(img.Architecture), "extra.ami_lookup"
		notes = append(notes, fmt.Sprintf("ami %s (%s, created %s): the newest of %d %s images named %q owned by %s",
			p.ami, awssdk.ToString(img.Name), awssdk.ToString(img.CreationDate), n, cfg.lookup.arch, cfg.lookup.name, cfg.lookup.owner))
	}
	if p.instanceType == "" {
		if p.arch == "" {
			arch, err := a.imageArch(ctx, p.ami, p.amiField)
			if err != nil {
				return p, err
			}
			p.arch = arch
		}
		s, err := chooseType(p.arch, cfg.cpu, cfg.memoryMB)
		if err != nil {
			return p, err
		}
		p.instanceType = s.name
		notes = append(notes, fmt.Sprintf("instance_type %s: the cheapest %s type of the built-in table with at least %v vCPUs and %v MiB",
			s, p.arch, cfg.cpu, cfg.memoryMB))
	}
	p.chosen = strings.Join(notes, "; ")
	return p, nil
}

// lookupImage returns the newest available image that l matches, by
// CreationDate and then name, and how many matched.
func (a *AWS) lookupImage(ctx context.Context, l amiLookup) (types.Image, int, error) {
	out, err := a.ec2.DescribeImages(ctx, &ec2.DescribeImagesInput{
		Owners: []string{l.owner},
		Filters: []types.Filter{
			{Name: awssdk.String("name"), Values: []string{l.name}},
			{Name: awssdk.String("architecture"), Values: []string{l.arch}},
			{Name: awssdk.String("state"), Values: []string{"available"}},
		},
	})
	if err != nil {
		return types.Image{}, 0, fmt.Errorf("look up an AMI (extra.ami_lookup): %w", classify(err))
	}
	imgs := out.Images
	if len(imgs) == 0 {
		return types.Image{}, 0, errdefs.NotFound("an AMI named %q owned by %s for %s in region %s (extra.ami_lookup)", l.name, l.owner, l.arch, a.region)
	}
	newest := slices.MaxFunc(imgs, func(x, y types.Image) int {
		return cmp.Or(compareDates(awssdk.ToString(x.CreationDate), awssdk.ToString(y.CreationDate)),
			strings.Compare(awssdk.ToString(x.Name), awssdk.ToString(y.Name)),
			strings.Compare(awssdk.ToString(x.ImageId), awssdk.ToString(y.ImageId)))
	})
	return newest, len(imgs), nil
}

// compareDates compares EC2's RFC 3339 dates; text that does not parse
// sorts first.
func compareDates(x, y string) int {
	tx, errx := time.Parse(time.RFC3339Nano, x)
	ty, erry := time.Parse(time.RFC3339Nano, y)
	switch {
	case errx != nil && erry != nil:
		return strings.Compare(x, y)
	case errx != nil:
		return -1
	case erry != nil:
		return 1
	}
	return tx.Compare(ty)
}

// imageArch returns the architecture of an AMI, which the choice of an
// instance type depends on.
func (a *AWS) imageArch(ctx context.Context, ami, field string) (string, error) {
	out, err := a.ec2.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{ami}})
	if err != nil {
		return "", fmt.Errorf("%s: describe image %s to choose an instance type for it: %w", field, ami, classify(err))
	}
	if len(out.Images) == 0 {
		return "", errdefs.NotFound("image %s (%s) in region %s", ami, field, a.region)
	}
	return string(out.Images[0].Architecture), nil
}

func runInput(cfg config, p plan, tags map[string]string, token string) *ec2.RunInstancesInput {
	in := &ec2.RunInstancesInput{
		ImageId:          awssdk.String(p.ami),
		InstanceType:     types.InstanceType(p.instanceType),
		MinCount:         awssdk.Int32(1),
		MaxCount:         awssdk.Int32(1),
		ClientToken:      awssdk.String(token),
		SecurityGroupIds: cfg.groupIDs,
		SecurityGroups:   cfg.groupNames,
		TagSpecifications: []types.TagSpecification{
			{ResourceType: types.ResourceTypeInstance, Tags: ec2Tags(tags)},
			{ResourceType: types.ResourceTypeVolume, Tags: ec2Tags(tags)},
		},
	}
	if cfg.subnet != "" {
		in.SubnetId = awssdk.String(cfg.subnet)
	}
	if cfg.keyName != "" {
		in.KeyName = awssdk.String(cfg.keyName)
	}
	if cfg.userData != "" {
		in.UserData = awssdk.String(base64.StdEncoding.EncodeToString([]byte(cfg.userData)))
	}
	if cfg.spot {
		opts := &types.SpotMarketOptions{
			SpotInstanceType:             types.SpotInstanceTypeOneTime,
			InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate,
		}
		if cfg.maxPrice != "" {
			opts.MaxPrice = awssdk.String(cfg.maxPrice)
		}
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot, SpotOptions: opts}
	}
	if cfg.hibernation {
		in.HibernationOptions = &types.HibernationOptionsRequest{Configured: awssdk.Bool(true)}
	}
	return in
}

func ec2Tags(m map[string]string) []types.Tag {
	out := make([]types.Tag, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, types.Tag{Key: awssdk.String(k), Value: awssdk.String(m[k])})
	}
	return out
}

// launchError says what to do about a launch EC2 refused.
func launchError(err error, p plan) error {
	var e *ec2Error
	if !errors.As(err, &e) {
		return err
	}
	switch e.code {
	case "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity":
		return fmt.Errorf("EC2 has no %s capacity for this launch now: try another instance type (extra.instance_type) or another zone (extra.subnet of a subnet there), or try again later: %w", p.instanceType, err)
	case "InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded":
		return fmt.Errorf("the account's EC2 quota is used up: terminate instances or ask AWS for a higher quota (Service Quotas): %w", err)
	case "SpotMaxPriceTooLow":
		return fmt.Errorf("the spot price of %s is above extra.max_price: raise it, remove it to pay up to the on-demand price, or launch on-demand: %w", p.instanceType, err)
	case "InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidAMIID.Unavailable":
		return fmt.Errorf("%s: image %s cannot be launched in this region: %w", p.amiField, p.ami, err)
	case "InvalidSubnetID.NotFound":
		return fmt.Errorf("extra.subnet: %w", err)
	case "InvalidGroup.NotFound", "InvalidSecurityGroupID.NotFound":
		return fmt.Errorf("extra.security_groups: %w", err)
	case "InvalidKeyPair.NotFound":
		return fmt.Errorf("extra.key_name: %w", err)
	}
	return err
}

// awaited is a running deployment and what it was launched with.
type awaited struct {
	provision.Deployment
	image, instanceType string
}

// errStopped is a launch whose instance is stopped: Provision leaves it.
var errStopped = errdefs.Class(errors.New("stopped"), errdefs.ErrConflict)

// awaitRunning polls the instance until it runs, and fails if it ends
// instead, or does not run within the wait timeout.
func (a *AWS) awaitRunning(ctx context.Context, id string) (awaited, error) {
	wctx, cancel := context.WithTimeout(ctx, a.waitTimeout)
	defer cancel()
	for {
		inst, err := a.describe(wctx, id)
		// Right after RunInstances, DescribeInstances may not know the
		// instance yet (EC2's eventual consistency): keep asking.
		if err != nil && !errdefs.IsNotFound(err) && wctx.Err() == nil {
			return awaited{}, err
		}
		if err == nil {
			switch inst.State.Name {
			case types.InstanceStateNameRunning:
				return awaited{a.deploymentOf(inst), awssdk.ToString(inst.ImageId), string(inst.InstanceType)}, nil
			case types.InstanceStateNameShuttingDown, types.InstanceStateNameTerminated:
				class := errdefs.ErrUnavailable
				if inst.StateReason != nil && noCapacity(awssdk.ToString(inst.StateReason.Code)) {
					class = provision.ErrNoCapacity
				}
				return awaited{}, errdefs.Class(fmt.Errorf("instance %s ended while launching: %s", id, reasonOf(inst)), class)
			case types.InstanceStateNameStopping, types.InstanceStateNameStopped:
				return awaited{}, fmt.Errorf("instance %s, launched earlier for this deployment, is %s (%s); start it, or destroy it and provision again: %w",
					id, stateOf(inst), reasonOf(inst), errStopped)
			}
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return awaited{}, ctx.Err()
			}
			return awaited{}, errdefs.Class(fmt.Errorf("instance %s is not running after %v", id, a.waitTimeout), errdefs.ErrUnavailable)
		case <-time.After(a.pollInterval):
		}
	}
}

// Destroy terminates the instance; one that is gone already is not an
// error. It does not wait for the instance to end: State says when.
func (a *AWS) Destroy(ctx context.Context, d provision.Deployment) error {
	id, err := resourceID(d)
	if err != nil {
		return err
	}
	if err := a.terminate(ctx, id); err != nil {
		return fmt.Errorf("destroy %s: %w", d.Name, err)
	}
	return nil
}

func (a *AWS) terminate(ctx context.Context, id string) error {
	_, err := a.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err = classify(err); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("terminate instance %s: %w", id, err)
	}
	return nil
}

// Find lists the instances nodemgr made in this region that carry all
// the given labels as tags (none: all of them), terminated ones left out.
// The orchestrator sweeps what its owner label marks and no stored
// machine accounts for.
func (a *AWS) Find(ctx context.Context, labels map[string]string) ([]provision.Deployment, error) {
	filters := []types.Filter{
		{Name: awssdk.String("tag-key"), Values: []string{TagDeployment}},
		{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running", "shutting-down", "stopping", "stopped"}},
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		filters = append(filters, types.Filter{Name: awssdk.String("tag:" + k), Values: []string{labels[k]}})
	}
	found, err := a.describeFiltered(ctx, filters)
	if err != nil {
		return nil, fmt.Errorf("find instances: %w", err)
	}
	out := make([]provision.Deployment, 0, len(found))
	for _, inst := range found {
		out = append(out, a.deploymentOf(inst))
	}
	slices.SortFunc(out, func(x, y provision.Deployment) int {
		return strings.Compare(x.Name+"\x00"+x.ResourceID, y.Name+"\x00"+y.ResourceID)
	})
	return out, nil
}

// describeFiltered lists the instances that pass filters, all pages.
func (a *AWS) describeFiltered(ctx context.Context, filters []types.Filter) ([]types.Instance, error) {
	var out []types.Instance
	pages := ec2.NewDescribeInstancesPaginator(a.ec2, &ec2.DescribeInstancesInput{Filters: filters})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describe instances: %w", classify(err))
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
	}
	return out, nil
}

// describe returns one instance; a missing one is errdefs.ErrNotFound.
func (a *AWS) describe(ctx context.Context, id string) (types.Instance, error) {
	out, err := a.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return types.Instance{}, fmt.Errorf("describe instance %s: %w", id, classify(err))
	}
	for _, r := range out.Reservations {
		for _, inst := range r.Instances {
			if awssdk.ToString(inst.InstanceId) == id && inst.State != nil {
				return inst, nil
			}
		}
	}
	return types.Instance{}, errdefs.NotFound("instance %s", id)
}

func (a *AWS) deploymentOf(inst types.Instance) provision.Deployment {
	tags := map[string]string{}
	for _, t := range inst.Tags {
		tags[awssdk.ToString(t.Key)] = awssdk.ToString(t.Value)
	}
	d := provision.Deployment{
		Provider:   "aws",
		ResourceID: awssdk.ToString(inst.InstanceId),
		Name:       cmp.Or(tags[TagDeployment], tags[TagName]),
		Template:   tags[TagTemplate],
		State:      stateOf(inst),
		Executors:  []string{CapExec, CapSFTP, CapRsync},
		Labels:     tags,
		CreatedAt:  awssdk.ToTime(inst.LaunchTime).UTC(),
	}
	d.Address = awssdk.ToString(inst.PublicIpAddress)
	if a.private || d.Address == "" {
		d.Address = awssdk.ToString(inst.PrivateIpAddress)
	}
	return d
}

func resourceID(d provision.Deployment) (string, error) { return d.Resource("instance ID") }

var (
	_ provision.Provider      = (*AWS)(nil)
	_ provision.Lifecycle     = (*AWS)(nil)
	_ provision.VerbChecker   = (*AWS)(nil)
	_ provision.StateReasoner = (*AWS)(nil)
	_ provision.Noticer       = (*AWS)(nil)
	_ provision.Archer        = (*AWS)(nil)
	_ ec2API                  = (*ec2.Client)(nil)
)
