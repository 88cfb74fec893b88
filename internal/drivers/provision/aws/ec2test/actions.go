package ec2test

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// apiError is an EC2 error answer.
type apiError struct {
	status        int
	code, message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status, code, fmt.Sprintf(format, args...)}
}

var authHeader = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=[^/]+/\d{8}/([a-z0-9-]+)/ec2/aws4_request, SignedHeaders=[a-z0-9;-]+, Signature=[0-9a-f]{64}$`)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	reqID := fmt.Sprintf("%08x-0000-4000-8000-000000000000", time.Now().UnixNano()&0xffffffff)
	fail := func(e *apiError) {
		w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
		w.WriteHeader(e.status)
		fmt.Fprintf(w, "%s<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>%s</RequestID></Response>",
			xml.Header, e.code, escape(e.message), reqID)
	}
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		fail(errorf(400, "InvalidAction", "EC2 takes form POSTs, got %s %s", r.Method, r.Header.Get("Content-Type")))
		return
	}
	m := authHeader.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil || r.Header.Get("X-Amz-Date") == "" {
		fail(errorf(401, "AuthFailure", "AWS was not able to validate the provided access credentials"))
		return
	}
	if m[1] != Region {
		fail(errorf(401, "AuthFailure", "the request was signed for region %s, not %s", m[1], Region))
		return
	}
	if err := r.ParseForm(); err != nil {
		fail(errorf(400, "InvalidParameterValue", "%v", err))
		return
	}
	form := r.PostForm
	if v := form.Get("Version"); v != "2016-11-15" {
		fail(errorf(400, "InvalidParameterValue", "unsupported API version %q", v))
		return
	}
	action := form.Get("Action")
	handlers := map[string]func(url.Values) (any, *apiError){
		"RunInstances":       s.runInstances,
		"DescribeInstances":  s.describeInstances,
		"DescribeImages":     s.describeImages,
		"StartInstances":     s.startInstances,
		"StopInstances":      s.stopInstances,
		"RebootInstances":    s.rebootInstances,
		"TerminateInstances": s.terminateInstances,
	}
	h := handlers[action]
	if h == nil {
		fail(errorf(400, "InvalidAction", "The action %s is not valid for this web service.", action))
		return
	}
	s.mu.Lock()
	s.calls[action]++
	resp, apiErr := h(form)
	s.mu.Unlock()
	if apiErr != nil {
		fail(apiErr)
		return
	}
	body, err := xml.Marshal(resp)
	if err != nil {
		fail(errorf(500, "InternalError", "%v", err))
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	out := strings.Replace(string(body), "<requestId></requestId>", "<requestId>"+reqID+"</requestId>", 1)
	fmt.Fprint(w, xml.Header+out)
}

func escape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// list reads a flattened Query list: prefix.1, prefix.2, ...
func list(form url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[prefix+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

type filter struct {
	name   string
	values []string
}

func filters(form url.Values) []filter {
	var out []filter
	for i := 1; ; i++ {
		p := "Filter." + strconv.Itoa(i)
		name, ok := form[p+".Name"]
		if !ok {
			return out
		}
		out = append(out, filter{name[0], list(form, p+".Value")})
	}
}

// globMatch matches EC2's filter wildcards: * any run, ? one character.
func globMatch(pattern, s string) bool {
	// path.Match treats / specially and has classes; EC2 does neither.
	p := strings.NewReplacer(`\`, `\\`, "[", `\[`, "]", `\]`).Replace(pattern)
	ok, err := path.Match(strings.ReplaceAll(p, "/", "\x00"), strings.ReplaceAll(s, "/", "\x00"))
	return err == nil && ok
}

func anyMatch(values []string, s string) bool {
	for _, v := range values {
		if globMatch(v, s) {
			return true
		}
	}
	return false
}

// stateCodes are EC2's numeric state codes.
var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

// advance applies a state change whose time has come.
func (s *Server) advance(inst *instance) {
	if inst.next == "" || time.Now().Before(inst.until) {
		return
	}
	inst.State, inst.next = inst.next, ""
	inst.setReason(inst.nextReason)
}

func (inst *instance) setReason(r [2]string) { inst.reason, inst.StateReason = r, r[0] }

// move puts inst in state now, and in state next after the delay (at once
// when there is none); reason is the state reason of both, except that a
// pending or running instance has none.
func (s *Server) move(inst *instance, now, next string, reason [2]string) {
	inst.State = now
	if now == "pending" {
		inst.setReason([2]string{})
	} else {
		inst.setReason(reason)
	}
	inst.next, inst.nextReason, inst.until = next, reason, time.Now().Add(s.delay)
	if next == "running" {
		inst.nextReason = [2]string{}
	}
	s.advance(inst)
}

func (s *Server) find(id string) *instance {
	for _, inst := range s.instances {
		if inst.ID == id {
			return inst
		}
	}
	return nil
}

var instanceID = regexp.MustCompile(`^i-[0-9a-f]{8,17}$`)

// lookup returns the instances ids name, all of which must exist.
func (s *Server) lookup(ids []string) ([]*instance, *apiError) {
	var out []*instance
	for _, id := range ids {
		if !instanceID.MatchString(id) {
			return nil, errorf(400, "InvalidInstanceID.Malformed", "Invalid id: %q", id)
		}
		inst := s.find(id)
		if inst == nil {
			return nil, errorf(400, "InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
		}
		s.advance(inst)
		out = append(out, inst)
	}
	return out, nil
}

func (s *Server) image(id string) *Image {
	for i := range s.images {
		if s.images[i].ID == id {
			return &s.images[i]
		}
	}
	return nil
}

func (s *Server) runInstances(form url.Values) (any, *apiError) {
	imageID := form.Get("ImageId")
	img := s.image(imageID)
	if imageID == "" {
		return nil, errorf(400, "MissingParameter", "The request must contain the parameter ImageId")
	}
	if img == nil {
		return nil, errorf(400, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", imageID)
	}
	if form.Get("MinCount") != "1" || form.Get("MaxCount") != "1" {
		return nil, errorf(400, "InvalidParameterValue", "this fake launches one instance at a time (MinCount and MaxCount 1), got %s and %s", form.Get("MinCount"), form.Get("MaxCount"))
	}
	typ := form.Get("InstanceType")
	if typ == "" {
		typ = "m1.small"
	}
	spot := form.Get("InstanceMarketOptions.MarketType") == "spot"
	if spot {
		if v := form.Get("InstanceMarketOptions.SpotOptions.SpotInstanceType"); v != "" && v != "one-time" {
			return nil, errorf(400, "InvalidParameterValue", "this fake launches one-time spot instances only, not %s", v)
		}
	}
	hib := form.Get("HibernationOptions.Configured") == "true"
	if hib && spot {
		return nil, errorf(400, "InvalidParameterCombination", "Hibernation is not supported for one-time Spot Instance requests.")
	}
	token := form.Get("ClientToken")
	if len(token) > 64 {
		return nil, errorf(400, "InvalidParameterValue", "ClientToken is longer than 64 characters")
	}
	if prev := s.tokens[token]; token != "" && prev != nil {
		if prev.ImageID != imageID || prev.InstanceType != typ {
			return nil, errorf(400, "IdempotentParameterMismatch", "Arguments on this idempotent request are inconsistent with arguments used in previous request(s).")
		}
		return s.reservation(prev), nil
	}
	if s.noCapacity[typ] {
		return nil, errorf(500, "InsufficientInstanceCapacity",
			"We currently do not have sufficient %s capacity in the Availability Zone you requested (%sa). Our system will be working on provisioning additional capacity. You can currently get %s capacity by not specifying an Availability Zone in your request or choosing %sb, %sc.",
			typ, Region, typ, Region, Region)
	}

	s.seq++
	inst := &instance{
		Instance: Instance{
			ID:           fmt.Sprintf("i-0%016x", 0xfa4e0000+s.seq),
			ImageID:      imageID,
			InstanceType: typ,
			Spot:         spot,
			MaxPrice:     form.Get("InstanceMarketOptions.SpotOptions.MaxPrice"),
			Hibernation:  hib,
			Tags:         map[string]string{},
			ClientToken:  token,
			KeyName:      form.Get("KeyName"),
			SubnetID:     form.Get("SubnetId"),
			Launched:     time.Now().UTC().Truncate(time.Second),
		},
		arch: img.Architecture,
		n:    s.seq,
	}
	inst.SecurityGroups = append(list(form, "SecurityGroupId"), list(form, "SecurityGroup")...)
	if ud := form.Get("UserData"); ud != "" {
		b, err := base64.StdEncoding.DecodeString(ud)
		if err != nil {
			return nil, errorf(400, "InvalidParameterValue", "Invalid BASE64 encoding of user data.")
		}
		inst.UserData = string(b)
	}
	for i := 1; ; i++ {
		p := "TagSpecification." + strconv.Itoa(i)
		rt, ok := form[p+".ResourceType"]
		if !ok {
			break
		}
		if rt[0] != "instance" {
			continue
		}
		for j := 1; ; j++ {
			k, ok := form[p+".Tag."+strconv.Itoa(j)+".Key"]
			if !ok {
				break
			}
			inst.Tags[k[0]] = form.Get(p + ".Tag." + strconv.Itoa(j) + ".Value")
		}
	}
	if img.FailLaunch != "" {
		s.move(inst, "pending", "terminated", [2]string{img.FailLaunch, img.FailLaunch + ": Internal error on launch"})
	} else {
		s.move(inst, "pending", "running", [2]string{})
	}
	s.instances = append(s.instances, inst)
	if img.FailLaunch == "" {
		s.launched(inst)
	}
	if token != "" {
		s.tokens[token] = inst
	}
	if s.lose > 0 {
		s.lose--
		return nil, errorf(500, "InternalError", "An internal error has occurred")
	}
	return s.reservation(inst), nil
}

func (s *Server) describeInstances(form url.Values) (any, *apiError) {
	var cands []*instance
	if ids := list(form, "InstanceId"); len(ids) > 0 {
		var err *apiError
		if cands, err = s.lookup(ids); err != nil {
			return nil, err
		}
	} else {
		for _, inst := range s.instances {
			s.advance(inst)
			cands = append(cands, inst)
		}
	}
	fs := filters(form)
	for _, f := range fs {
		switch {
		case f.name == "instance-state-name", f.name == "instance-id", f.name == "tag-key", f.name == "client-token",
			strings.HasPrefix(f.name, "tag:"):
		default:
			return nil, errorf(400, "InvalidParameterValue", "The filter '%s' is invalid", f.name)
		}
	}
	resp := describeInstancesResponse{NS: ns}
	for _, inst := range cands {
		if s.passes(inst, fs) {
			resp.Reservations = append(resp.Reservations, s.reservation(inst).reservation)
		}
	}
	return resp, nil
}

func (s *Server) passes(inst *instance, fs []filter) bool {
	for _, f := range fs {
		var ok bool
		switch {
		case f.name == "instance-state-name":
			ok = anyMatch(f.values, inst.State)
		case f.name == "instance-id":
			ok = anyMatch(f.values, inst.ID)
		case f.name == "client-token":
			ok = anyMatch(f.values, inst.ClientToken)
		case f.name == "tag-key":
			for k := range inst.Tags {
				ok = ok || anyMatch(f.values, k)
			}
		default:
			v, has := inst.Tags[strings.TrimPrefix(f.name, "tag:")]
			ok = has && anyMatch(f.values, v)
		}
		if !ok {
			return false
		}
	}
	return true
}

func (s *Server) describeImages(form url.Values) (any, *apiError) {
	ids, owners, fs := list(form, "ImageId"), list(form, "Owner"), filters(form)
	for _, id := range ids {
		if s.image(id) == nil {
			return nil, errorf(400, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", id)
		}
	}
	resp := describeImagesResponse{NS: ns}
	for _, img := range s.images {
		if len(ids) > 0 && !slices.Contains(ids, img.ID) {
			continue
		}
		if len(owners) > 0 && !slices.ContainsFunc(owners, func(o string) bool {
			return o == img.Owner || (o == "self" && img.Owner == Account) || (o != "" && o == img.OwnerAlias)
		}) {
			continue
		}
		ok := true
		for _, f := range fs {
			switch f.name {
			case "name":
				ok = ok && anyMatch(f.values, img.Name)
			case "architecture":
				ok = ok && anyMatch(f.values, img.Architecture)
			case "state":
				ok = ok && anyMatch(f.values, "available")
			case "image-id":
				ok = ok && anyMatch(f.values, img.ID)
			default:
				return nil, errorf(400, "InvalidParameterValue", "The filter '%s' is invalid", f.name)
			}
		}
		if ok {
			resp.Images = append(resp.Images, xmlImage{
				ImageID: img.ID, Location: img.OwnerAlias + "/" + img.Name, State: "available",
				OwnerID: img.Owner, OwnerAlias: img.OwnerAlias, Created: img.Created.UTC().Format("2006-01-02T15:04:05.000Z"),
				Public: true, Architecture: img.Architecture, ImageType: "machine", Name: img.Name,
				RootDeviceType: "ebs", RootDeviceName: "/dev/xvda", Virtualization: "hvm", Hypervisor: "xen",
			})
		}
	}
	return resp, nil
}

func (s *Server) startInstances(form url.Values) (any, *apiError) {
	insts, err := s.lookup(list(form, "InstanceId"))
	if err != nil {
		return nil, err
	}
	for _, inst := range insts {
		switch inst.State {
		case "running", "pending", "stopped":
		default:
			return nil, errorf(400, "IncorrectInstanceState", "The instance '%s' is not in a state from which it can be started.", inst.ID)
		}
	}
	return s.change(insts, "StartInstancesResponse", func(inst *instance) {
		if inst.State == "stopped" {
			inst.transition = ""
			s.move(inst, "pending", "running", [2]string{})
		}
	}), nil
}

func (s *Server) stopInstances(form url.Values) (any, *apiError) {
	insts, err := s.lookup(list(form, "InstanceId"))
	if err != nil {
		return nil, err
	}
	hibernate := form.Get("Hibernate") == "true"
	for _, inst := range insts {
		switch {
		case inst.Spot:
			return nil, errorf(400, "UnsupportedOperation", "You can't stop the Spot Instance '%s' because it is associated with a one-time Spot Instance request. You can only stop Spot Instances associated with persistent Spot Instance requests.", inst.ID)
		case hibernate && !inst.Hibernation:
			return nil, errorf(400, "UnsupportedHibernationConfiguration", "The instance '%s' does not have hibernation configured. Before you can hibernate an instance, you must enable hibernation when you launch it.", inst.ID)
		case inst.State == "stopped" || inst.State == "stopping":
			if hibernate && inst.reason[0] != "Client.UserInitiatedHibernate" {
				return nil, errorf(400, "IncorrectInstanceState", "The instance '%s' is not in a state from which it can be hibernated.", inst.ID)
			}
		case inst.State != "running":
			return nil, errorf(400, "IncorrectInstanceState", "This instance '%s' is not in a state from which it can be stopped.", inst.ID)
		}
	}
	return s.change(insts, "StopInstancesResponse", func(inst *instance) {
		if inst.State != "running" {
			return
		}
		reason := [2]string{"Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown"}
		if hibernate {
			reason = [2]string{"Client.UserInitiatedHibernate", "Client.UserInitiatedHibernate: User initiated hibernate"}
		}
		inst.transition = "User initiated (" + time.Now().UTC().Format("2006-01-02 15:04:05 MST") + ")"
		s.move(inst, "stopping", "stopped", reason)
	}), nil
}

func (s *Server) rebootInstances(form url.Values) (any, *apiError) {
	insts, err := s.lookup(list(form, "InstanceId"))
	if err != nil {
		return nil, err
	}
	for _, inst := range insts {
		if inst.State != "running" {
			return nil, errorf(400, "IncorrectInstanceState", "The instance '%s' is not in a state from which it can be rebooted.", inst.ID)
		}
	}
	return rebootResponse{NS: ns, Return: true}, nil
}

func (s *Server) terminateInstances(form url.Values) (any, *apiError) {
	ids := list(form, "InstanceId")
	if len(ids) == 0 {
		return nil, errorf(400, "MissingParameter", "The request must contain the parameter InstanceId")
	}
	insts, err := s.lookup(ids)
	if err != nil {
		return nil, err
	}
	return s.change(insts, "TerminateInstancesResponse", func(inst *instance) {
		if inst.State == "terminated" || inst.State == "shutting-down" {
			return
		}
		inst.transition = "User initiated (" + time.Now().UTC().Format("2006-01-02 15:04:05 MST") + ")"
		s.move(inst, "shutting-down", "terminated", [2]string{"Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown"})
		s.ended(inst)
	}), nil
}

// change applies f to each instance and answers with their state changes.
func (s *Server) change(insts []*instance, root string, f func(*instance)) stateChangeResponse {
	resp := stateChangeResponse{XMLName: xml.Name{Local: root}, NS: ns}
	for _, inst := range insts {
		prev := inst.State
		f(inst)
		resp.Items = append(resp.Items, xmlStateChange{ID: inst.ID, Current: xmlState{stateCodes[inst.State], inst.State}, Previous: xmlState{stateCodes[prev], prev}})
	}
	return resp
}

func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
