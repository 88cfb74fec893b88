package ec2test

import (
	"encoding/xml"
	"fmt"
	"slices"
	"time"
)

// EC2's answers, in the shapes of its Query API (2016-11-15): lists are
// elements holding <item>s, names are lowerCamelCase.

const ns = "http://ec2.amazonaws.com/doc/2016-11-15/"

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlReason struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type xmlGroup struct {
	ID   string `xml:"groupId"`
	Name string `xml:"groupName"`
}

type xmlInstance struct {
	ID                string     `xml:"instanceId"`
	ImageID           string     `xml:"imageId"`
	State             xmlState   `xml:"instanceState"`
	PrivateDNSName    string     `xml:"privateDnsName"`
	DNSName           string     `xml:"dnsName"`
	Reason            string     `xml:"reason"`
	KeyName           string     `xml:"keyName,omitempty"`
	LaunchIndex       int        `xml:"amiLaunchIndex"`
	InstanceType      string     `xml:"instanceType"`
	LaunchTime        string     `xml:"launchTime"`
	AvailabilityZone  string     `xml:"placement>availabilityZone"`
	Monitoring        string     `xml:"monitoring>state"`
	SubnetID          string     `xml:"subnetId,omitempty"`
	VpcID             string     `xml:"vpcId"`
	PrivateIP         string     `xml:"privateIpAddress,omitempty"`
	PublicIP          string     `xml:"ipAddress,omitempty"`
	Groups            []xmlGroup `xml:"groupSet>item"`
	Architecture      string     `xml:"architecture"`
	RootDeviceType    string     `xml:"rootDeviceType"`
	RootDeviceName    string     `xml:"rootDeviceName"`
	Lifecycle         string     `xml:"instanceLifecycle,omitempty"`
	SpotRequestID     string     `xml:"spotInstanceRequestId,omitempty"`
	ClientToken       string     `xml:"clientToken,omitempty"`
	Tags              []xmlTag   `xml:"tagSet>item"`
	StateReason       *xmlReason `xml:"stateReason,omitempty"`
	HibernationConfig bool       `xml:"hibernationOptions>configured"`
	Virtualization    string     `xml:"virtualizationType"`
	Hypervisor        string     `xml:"hypervisor"`
}

type reservation struct {
	ID        string        `xml:"reservationId"`
	OwnerID   string        `xml:"ownerId"`
	Instances []xmlInstance `xml:"instancesSet>item"`
}

type runInstancesResponse struct {
	XMLName   xml.Name `xml:"RunInstancesResponse"`
	NS        string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	reservation
}

type describeInstancesResponse struct {
	XMLName      xml.Name      `xml:"DescribeInstancesResponse"`
	NS           string        `xml:"xmlns,attr"`
	RequestID    string        `xml:"requestId"`
	Reservations []reservation `xml:"reservationSet>item"`
}

type xmlImage struct {
	ImageID        string `xml:"imageId"`
	Location       string `xml:"imageLocation"`
	State          string `xml:"imageState"`
	OwnerID        string `xml:"imageOwnerId"`
	OwnerAlias     string `xml:"imageOwnerAlias,omitempty"`
	Created        string `xml:"creationDate"`
	Public         bool   `xml:"isPublic"`
	Architecture   string `xml:"architecture"`
	ImageType      string `xml:"imageType"`
	Name           string `xml:"name"`
	RootDeviceType string `xml:"rootDeviceType"`
	RootDeviceName string `xml:"rootDeviceName"`
	Virtualization string `xml:"virtualizationType"`
	Hypervisor     string `xml:"hypervisor"`
}

type describeImagesResponse struct {
	XMLName   xml.Name   `xml:"DescribeImagesResponse"`
	NS        string     `xml:"xmlns,attr"`
	RequestID string     `xml:"requestId"`
	Images    []xmlImage `xml:"imagesSet>item"`
}

type xmlStateChange struct {
	ID       string   `xml:"instanceId"`
	Current  xmlState `xml:"currentState"`
	Previous xmlState `xml:"previousState"`
}

type stateChangeResponse struct {
	XMLName   xml.Name
	NS        string           `xml:"xmlns,attr"`
	RequestID string           `xml:"requestId"`
	Items     []xmlStateChange `xml:"instancesSet>item"`
}

type rebootResponse struct {
	XMLName   xml.Name `xml:"RebootInstancesResponse"`
	NS        string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	Return    bool     `xml:"return"`
}

// reservation answers RunInstances with the instance's reservation; its
// embedded reservation serves DescribeInstances.
func (s *Server) reservation(inst *instance) runInstancesResponse {
	return runInstancesResponse{NS: ns, reservation: reservation{
		ID:        fmt.Sprintf("r-0%016x", 0x5e500000+inst.n),
		OwnerID:   Account,
		Instances: []xmlInstance{s.xmlInstance(inst)},
	}}
}

func (s *Server) xmlInstance(inst *instance) xmlInstance {
	x := xmlInstance{
		ID:                inst.ID,
		ImageID:           inst.ImageID,
		State:             xmlState{stateCodes[inst.State], inst.State},
		Reason:            inst.transition,
		KeyName:           inst.KeyName,
		InstanceType:      inst.InstanceType,
		LaunchTime:        inst.Launched.Format(time.RFC3339),
		AvailabilityZone:  Region + "a",
		Monitoring:        "disabled",
		SubnetID:          inst.SubnetID,
		VpcID:             "vpc-0fa4e000000000001",
		Architecture:      inst.arch,
		RootDeviceType:    "ebs",
		RootDeviceName:    "/dev/xvda",
		ClientToken:       inst.ClientToken,
		HibernationConfig: inst.Hibernation,
		Virtualization:    "hvm",
		Hypervisor:        "xen",
	}
	if x.SubnetID == "" {
		x.SubnetID = "subnet-0fa4e000000000001"
	}
	if inst.State != "terminated" {
		// Private addresses in 10.0.0.0/16; public ones from TEST-NET-3
		// (RFC 5737), which no one answers on.
		x.PrivateIP = fmt.Sprintf("10.0.%d.%d", inst.n/250, 4+inst.n%250)
		x.PrivateDNSName = "ip-" + dashes(x.PrivateIP) + ".ec2.internal"
	}
	if inst.State == "running" {
		x.PublicIP = fmt.Sprintf("203.0.113.%d", 1+inst.n%254)
		x.DNSName = "ec2-" + dashes(x.PublicIP) + ".compute-1.amazonaws.com"
	}
	if inst.Spot {
		x.Lifecycle = "spot"
		x.SpotRequestID = fmt.Sprintf("sir-%08x", 0x5b070000+inst.n)
	}
	for _, g := range inst.SecurityGroups {
		x.Groups = append(x.Groups, xmlGroup{ID: g, Name: g})
	}
	for _, k := range sortedKeys(inst.Tags) {
		x.Tags = append(x.Tags, xmlTag{k, inst.Tags[k]})
	}
	if inst.reason[0] != "" {
		x.StateReason = &xmlReason{inst.reason[0], inst.reason[1]}
	}
	return x
}

func dashes(ip string) string {
	out := []byte(ip)
	for i, c := range out {
		if c == '.' {
			out[i] = '-'
		}
	}
	return string(out)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
