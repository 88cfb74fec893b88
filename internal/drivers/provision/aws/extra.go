package aws

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// The Extra keys parseExtra reads, which overrides.aws may name, are its
// record's (records.AWS.ExtraKeys).

// Architectures ami_lookup and the instance type table know.
const (
	archX86 = "x86_64"
	archARM = "arm64"
)

// maxUserData is EC2's limit on user data before base64 encoding.
const maxUserData = 16 << 10

// config is what Provision takes from a spec's Extra.
type config struct {
	ami          string     // an AMI ID, when no lookup is asked for
	amiField     string     // the Extra key ami came from, for messages
	lookup       *amiLookup // finds the AMI instead of ami
	instanceType string     // empty: chosen from cpu and memoryMB
	cpu          float64
	memoryMB     float64
	subnet       string
	groupIDs     []string // security groups by ID
	groupNames   []string // security groups by name (default VPC)
	keyName      string
	userData     string // as given; base64-encoded when sent
	spot         bool
	maxPrice     string
	hibernation  bool
	tags         map[string]string
}

// amiLookup asks DescribeImages for the newest AMI of a name.
type amiLookup struct {
	name  string // a pattern with * and ?
	owner string
	arch  string
}

var (
	amiID        = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
	instanceType = regexp.MustCompile(`^[a-z][a-z0-9-]*\.[a-z0-9-]+$`)
	price        = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
)

// parseExtra reads the keys the aws provider understands; keys meant for
// other providers, or for nodemgr itself, are ignored.
func parseExtra(extra map[string]any) (config, error) {
	var c config
	var err error

	if t, err := str(extra, "image_type"); err != nil {
		return c, err
	} else if t != "" && t != "ami" {
		return c, errdefs.Field("extra.image_type", "%q is not an image type the aws provider takes; only \"ami\"", t)
	}
	if c.lookup, err = parseLookup(extra); err != nil {
		return c, err
	}
	if c.ami, err = str(extra, "ami"); err != nil {
		return c, err
	}
	c.amiField = "extra.ami"
	if c.ami != "" && !amiID.MatchString(c.ami) {
		return c, errdefs.Field("extra.ami", "%q is not an AMI ID (ami- and 8 or 17 hex digits)", c.ami)
	}
	if c.ami == "" {
		image, err := str(extra, "image")
		if err != nil {
			return c, err
		}
		switch {
		case amiID.MatchString(image):
			c.ami, c.amiField = image, "extra.image"
		case c.lookup == nil && image != "":
			return c, errdefs.Field("extra.image", "%q is not an AMI ID; the aws provider needs extra.ami (ami-...), or extra.ami_lookup {name, owner, architecture} (a mapping can turn a generic image name into either)", image)
		}
	}
	if c.lookup == nil && c.ami == "" {
		return c, errdefs.Field("extra.ami", "the aws provider needs an AMI: set extra.ami (ami-...), or extra.ami_lookup {name, owner, architecture}")
	}

	if c.instanceType, err = str(extra, "instance_type"); err != nil {
		return c, err
	}
	if c.instanceType != "" && !instanceType.MatchString(c.instanceType) {
		return c, errdefs.Field("extra.instance_type", "%q is not an EC2 instance type such as t3.micro", c.instanceType)
	}
	for _, k := range []string{"cpu", "memoryMB"} {
		n, _, err := number(extra, k)
		if err != nil {
			return c, err
		}
		if n < 0 {
			return c, errdefs.Field("extra."+k, "%v is negative", n)
		}
		if k == "cpu" {
			c.cpu = n
		} else {
			c.memoryMB = n
		}
	}

	if c.subnet, err = str(extra, "subnet"); err != nil {
		return c, err
	}
	if c.subnet != "" && !strings.HasPrefix(c.subnet, "subnet-") {
		return c, errdefs.Field("extra.subnet", "%q is not a subnet ID (subnet-...)", c.subnet)
	}
	if v, ok := extra["security_groups"]; ok && v != nil {
		var groups []string
		if s, isStr := v.(string); isStr {
			groups = []string{s}
		} else if groups, err = stringList("security_groups", v); err != nil {
			return c, err
		}
		for i, g := range groups {
			switch {
			case g == "":
				return c, errdefs.Field(fmt.Sprintf("extra.security_groups[%d]", i), "is empty")
			case strings.HasPrefix(g, "sg-"):
				c.groupIDs = append(c.groupIDs, g)
			default:
				c.groupNames = append(c.groupNames, g)
			}
		}
	}
	if c.keyName, err = str(extra, "key_name"); err != nil {
		return c, err
	}
	if c.userData, err = str(extra, "user_data"); err != nil {
		return c, err
	}
	if len(c.userData) > maxUserData {
		return c, errdefs.TooLarge("extra.user_data", "is %d bytes; EC2 takes %d at most", len(c.userData), maxUserData)
	}

	if how, err := str(extra, provision.ExtraBootstrap); err != nil {
		return c, err
	} else if how != "" && how != "pull" && how != "push" {
		return c, errdefs.Field("extra."+provision.ExtraBootstrap, "%q is neither pull (cloud-init fetches the agent) nor push (over SSH)", how)
	}
	if c.spot, err = boolean(extra, "spot"); err != nil {
		return c, err
	}
	if c.maxPrice, err = parsePrice(extra); err != nil {
		return c, err
	}
	if c.maxPrice != "" && !c.spot {
		return c, errdefs.Field("extra.max_price", "applies to spot instances only; set extra.spot to true, or remove max_price")
	}
	if c.hibernation, err = boolean(extra, "hibernation"); err != nil {
		return c, err
	}
	if c.hibernation && c.spot {
		return c, errdefs.Field("extra.hibernation", "a one-time spot instance cannot hibernate (EC2 hibernates spot instances only of persistent requests); drop spot or hibernation")
	}

	if c.tags, err = stringMap(extra, "tags"); err != nil {
		return c, err
	}
	for _, k := range slices.Sorted(maps.Keys(c.tags)) {
		switch {
		case k == "" || len(k) > 128:
			return c, errdefs.Field("extra.tags", "tag key %q must be 1 to 128 characters", k)
		case strings.HasPrefix(strings.ToLower(k), "aws:"):
			return c, errdefs.Field("extra.tags."+k, "keys starting with aws: are AWS's own")
		case len(c.tags[k]) > 256:
			return c, errdefs.Field("extra.tags."+k, "the value is %d characters; EC2 takes 256 at most", len(c.tags[k]))
		}
	}
	return c, nil
}

func parseLookup(extra map[string]any) (*amiLookup, error) {
	v, ok := extra["ami_lookup"]
	if !ok || v == nil {
		return nil, nil
	}
	m, err := stringMap(extra, "ami_lookup")
	if err != nil {
		return nil, err
	}
	l := &amiLookup{name: m["name"], owner: m["owner"], arch: m["architecture"]}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "name" && k != "owner" && k != "architecture" {
			return nil, errdefs.Field("extra.ami_lookup."+k, "unknown key; ami_lookup takes name, owner and architecture")
		}
	}
	if l.name == "" {
		return nil, errdefs.Field("extra.ami_lookup.name", "is required: the AMI name to look for, * and ? as wildcards (ubuntu/images/hvm-ssd*/ubuntu-noble-24.04-amd64-server-*)")
	}
	if l.owner == "" {
		return nil, errdefs.Field("extra.ami_lookup.owner", "is required (amazon, self, or an account ID such as Canonical's 099720109477): anyone can publish an AMI of any name")
	}
	switch l.arch {
	case "":
		l.arch = archX86
	case archX86, archARM:
	default:
		return nil, errdefs.Field("extra.ami_lookup.architecture", "%q is not %s or %s", l.arch, archX86, archARM)
	}
	return l, nil
}

func parsePrice(extra map[string]any) (string, error) {
	v, ok := extra["max_price"]
	if !ok || v == nil {
		return "", nil
	}
	var s string
	if t, isStr := v.(string); isStr {
		s = strings.TrimSpace(t)
	} else {
		f, _, err := number(extra, "max_price")
		if err != nil {
			return "", err
		}
		s = strconv.FormatFloat(f, 'f', -1, 64)
	}
	if f, err := strconv.ParseFloat(s, 64); !price.MatchString(s) || err != nil || f <= 0 {
		return "", errdefs.Field("extra.max_price", "%q is not a positive price in USD per hour, such as 0.05", s)
	}
	return s, nil
}

// spotOf and hibernationOf read a deployment's Extra leniently: it was
// checked when the machine was made.
func spotOf(extra map[string]any) bool        { b, _ := extra["spot"].(bool); return b }
func hibernationOf(extra map[string]any) bool { b, _ := extra["hibernation"].(bool); return b }

// The shared readers of Extra, under the names this file uses.
var (
	str        = provision.ExtraString
	boolean    = provision.ExtraBool
	number     = provision.ExtraNumber
	stringList = provision.ExtraStrings
	stringMap  = provision.ExtraStringMap
)

// takeUserData sets the user data nodemgr gives the machine (a pull
// bootstrap); the template's own, if any, wins: the orchestrator gives
// none then.
func (c *config) takeUserData(ud string) error {
	if ud == "" || c.userData != "" {
		return nil
	}
	if len(ud) > maxUserData {
		return errdefs.TooLarge("user_data", "nodemgr's bootstrap user data is %d bytes; EC2 takes %d at most", len(ud), maxUserData)
	}
	c.userData = ud
	return nil
}
