package server

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// wireTypes maps each schema in components/schemas to the Go type that
// travels as it. A schema missing here fails TestOpenAPISchemasMatchWireTypes.
var wireTypes = map[string]any{
	"Error": api.Error{}, "ErrorBody": api.ErrorBody{}, "Health": api.Health{},
	"Resources": api.Resources{}, "Capability": api.Capability{}, "Onboarding": api.Onboarding{},
	"OnboardRequest": api.OnboardRequest{}, "CommitRequest": api.CommitRequest{}, "Commitment": api.Commitment{},
	"Allocation": api.Allocation{}, "MachineUsage": api.MachineUsage{},
	"UsageSample": api.UsageSample{}, "Summary": api.Summary{}, "UsageHistory": api.UsageHistory{}, "OverlayList": api.OverlayList{}, "OverlayNode": api.OverlayNode{}, "OverlayState": api.OverlayState{}, "OverlayLink": api.OverlayLink{}, "OverlayDevice": api.OverlayDevice{}, "NodeResources": api.NodeResources{},
	"ContainerPort": api.ContainerPort{}, "ContainerJob": api.ContainerJob{}, "ContainerCommand": api.ContainerCommand{},
	"ContainerUsage": api.ContainerUsage{}, "Container": api.Container{},
	"ContainerRestart": api.ContainerRestart{}, "ContainerVolume": api.ContainerVolume{},
	"Artifact": api.Artifact{}, "ArtifactInstall": api.ArtifactInstall{},
	"ServiceFile": api.ServiceFile{}, "RestartPolicy": api.RestartPolicy{}, "DrainSpec": api.DrainSpec{},
	"LogSpec": api.LogSpec{}, "ServiceSpec": api.ServiceSpec{}, "Service": api.Service{},
	"ServiceSummary": api.ServiceSummary{}, "LocalAPI": api.LocalAPI{}, "Presence": api.Presence{},
	"GPU": api.GPU{}, "Hardware": api.Hardware{}, "Node": api.Node{}, "Notice": api.Notice{}, "NodeList": api.NodeList{}, "ContainerList": api.ContainerList{},
	"NodePatch": api.NodePatch{}, "ShutdownRequest": api.ShutdownRequest{},
	"RegisterRequest": api.RegisterRequest{}, "RegisterResponse": api.RegisterResponse{},
	"HookResource": api.Resource{}, "Hook": api.Hook{}, "Hooks": api.Hooks{}, "CPUBinding": api.CPUBinding{},
	"WorkerSchedule": api.WorkerSchedule{}, "SuiteSpec": api.SuiteSpec{}, "TaskCounts": api.TaskCounts{},
	"Suite": api.Suite{}, "SuiteProblem": api.SuiteProblem{}, "SuiteList": api.SuiteList{}, "AssignRequest": assignRequest{},
	"TaskSpec": api.TaskSpec{}, "TaskFile": api.TaskFile{}, "InputFrom": api.InputFrom{}, "RetryPolicy": api.RetryPolicy{},
	"BlobInfo": struct {
		Digest string `json:"digest"`
		Size   int64  `json:"size"`
	}{}, "SubmitTasks": api.SubmitTasks{}, "SubmitResult": api.SubmitResult{}, "ActionCacheCleared": api.ActionCacheCleared{},
	"TaskResult": api.TaskResult{}, "TaskFailure": api.TaskFailure{}, "TaskLog": api.TaskLog{}, "Task": api.Task{}, "TaskList": api.TaskList{},
	"Document": api.Document{}, "TemplateList": api.TemplateList{}, "MappingList": api.MappingList{}, "ArtifactList": api.ArtifactList{}, "ServiceList": api.ServiceList{}, "AllocationList": api.AllocationList{}, "RenderStep": api.RenderStep{},
	"Rendered": api.Rendered{}, "Deployment": api.Deployment{}, "DeploymentList": api.DeploymentList{},
	"ProvisionRequest": api.ProvisionRequest{}, "ExecRequest": api.ExecRequest{}, "ExecEvent": api.ExecEvent{},
	"User": api.User{}, "UserList": api.UserList{}, "CreateUserRequest": api.CreateUserRequest{},
	"MembershipRequest": membershipRequest{}, "Token": api.Token{}, "TokenList": api.TokenList{},
	"CreateTokenRequest": api.CreateTokenRequest{}, "PoolCandidate": api.PoolCandidate{}, "PoolSpec": api.PoolSpec{}, "PoolPatch": api.PoolPatch{}, "Pool": api.Pool{}, "PoolDetail": api.PoolDetail{},
	"PoolMachine": api.PoolMachine{}, "PoolList": api.PoolList{}, "PoolEvent": api.PoolEvent{}, "PoolEventList": api.PoolEventList{},
	"EnsembleSpec": api.EnsembleSpec{}, "AllocationSpec": api.AllocationSpec{}, "Placement": api.Placement{},
	"EnsembleReplica": api.EnsembleReplica{}, "Ensemble": api.Ensemble{}, "EnsembleList": api.EnsembleList{},
	"ScheduleRequest": api.ScheduleRequest{}, "ScheduleVerdict": api.ScheduleVerdict{}, "ScheduleExplanation": api.ScheduleExplanation{},
}

// TestOpenAPISchemasMatchWireTypes keeps each schema true to its Go type:
// the same properties, JSON types that encoding/json produces, null only
// where Go can send it, and required only for fields that are always sent
// (for schemas only answers use, exactly those).
func TestOpenAPISchemasMatchWireTypes(t *testing.T) {
	doc := servedDoc(t)
	c := schemaChecker{schemas: doc.Components.Schemas, answerOnly: answerOnlySchemas(t, doc), done: map[string]bool{}}
	for name := range doc.Components.Schemas {
		v, ok := wireTypes[name]
		if !ok {
			t.Errorf("components/schemas/%s has no Go type in wireTypes; add it", name)
			continue
		}
		c.checkRef("components/schemas", "#/components/schemas/"+name, reflect.TypeOf(v), false)
	}
	sort.Strings(c.errs)
	for _, e := range c.errs {
		t.Error(e)
	}
}

// TestSchemaCheckerCatchesDrift proves the checker fails on each kind of
// drift between a schema and its Go type.
func TestSchemaCheckerCatchesDrift(t *testing.T) {
	type wire struct {
		Name  string            `json:"name"`
		Tags  []string          `json:"tags"`
		Note  string            `json:"note,omitempty"`
		When  *time.Time        `json:"when,omitempty"`
		Attrs map[string]string `json:"attrs,omitempty"`
	}
	good := `{"type": "object", "required": ["name", "tags"], "properties": {
		"name": {"type": "string"}, "tags": {"type": ["array", "null"], "items": {"type": "string"}},
		"note": {"type": "string"}, "when": {"type": "string", "format": "date-time"},
		"attrs": {"type": "object", "additionalProperties": {"type": "string"}}}}`
	for _, tc := range []struct{ name, from, to string }{
		{"good", "", ""},
		{"missing property", `"note": {"type": "string"},`, ""},
		{"extra property", `"name": {"type": "string"},`, `"name": {"type": "string"}, "nick": {"type": "string"},`},
		{"wrong type", `"name": {"type": "string"}`, `"name": {"type": "integer"}`},
		{"null where Go never sends it", `"name": {"type": "string"}`, `"name": {"type": ["string", "null"]}`},
		{"required but omitted when empty", `["name", "tags"]`, `["name", "tags", "note"]`},
		{"always sent but not required", `["name", "tags"]`, `["name"]`},
		{"time without date-time", `"format": "date-time"`, `"format": "date"`},
		{"wrong map values", `"additionalProperties": {"type": "string"}`, `"additionalProperties": {"type": "integer"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var schema map[string]any
			if err := json.Unmarshal([]byte(strings.Replace(good, tc.from, tc.to, 1)), &schema); err != nil {
				t.Fatal(err)
			}
			c := schemaChecker{answerOnly: map[string]bool{"W": true}, done: map[string]bool{}}
			c.check("W", schema, reflect.TypeOf(wire{}), false)
			if got, want := len(c.errs) > 0, tc.from != ""; got != want {
				t.Errorf("check(%s) errors = %q, want errors: %v", tc.name, c.errs, want)
			}
		})
	}
}

// answerOnlySchemas lists the component schemas that only answers use:
// for those, required must name every field Go always sends.
func answerOnlySchemas(t *testing.T, doc openapiDoc) map[string]bool {
	t.Helper()
	in, out := map[string]bool{}, map[string]bool{}
	for _, ops := range doc.Paths {
		for method, raw := range ops {
			if !isMethod(method) {
				continue
			}
			var op struct {
				RequestBody any            `json:"requestBody"`
				Responses   map[string]any `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			reach(op.RequestBody, doc.Components.Schemas, in)
			reach(op.Responses, doc.Components.Schemas, out)
		}
	}
	only := map[string]bool{}
	for name := range out {
		if !in[name] {
			only[name] = true
		}
	}
	return only
}

// reach marks the component schemas v refers to, directly or not.
func reach(v any, schemas map[string]map[string]any, seen map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			if name, ok := strings.CutPrefix(ref, "#/components/schemas/"); ok && !seen[name] {
				seen[name] = true
				reach(map[string]any(schemas[name]), schemas, seen)
			}
		}
		for _, x := range v {
			reach(x, schemas, seen)
		}
	case []any:
		for _, x := range v {
			reach(x, schemas, seen)
		}
	}
}

// schemaChecker compares schemas with Go types and collects what differs.
type schemaChecker struct {
	schemas    map[string]map[string]any
	answerOnly map[string]bool
	done       map[string]bool // component+type pairs already checked
	errs       []string
}

func (c *schemaChecker) errorf(at, format string, args ...any) {
	c.errs = append(c.errs, at+": "+fmt.Sprintf(format, args...))
}

var (
	timeType     = reflect.TypeOf(time.Time{})
	durationType = reflect.TypeOf(api.Duration(0))
	rawType      = reflect.TypeOf(json.RawMessage(nil))
)

// check compares schema s, found at at, with Go type t. nullable says the
// Go value may be sent as null there.
func (c *schemaChecker) check(at string, s map[string]any, t reflect.Type, nullable bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if ref, ok := s["$ref"].(string); ok {
		c.checkRef(at, ref, t, nullable)
		return
	}
	switch {
	case t == timeType:
		c.want(at, s, "string", nullable)
		if s["format"] != "date-time" {
			c.errorf(at, "a time needs format date-time, got %v", s["format"])
		}
	case t == durationType:
		c.want(at, s, "string", nullable)
	case t == rawType || t.Kind() == reflect.Interface:
		if s["type"] != nil {
			c.errorf(at, "Go sends any JSON value here; the schema says type %v", s["type"])
		}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		c.want(at, s, "string", nullable)
		if s["contentEncoding"] != "base64" {
			c.errorf(at, "bytes travel as base64; set contentEncoding: base64")
		}
	case t.Kind() == reflect.Slice:
		c.want(at, s, "array", nullable)
		c.checkItems(at+"[]", s["items"], t.Elem())
	case t.Kind() == reflect.Map:
		c.want(at, s, "object", nullable)
		c.checkItems(at+"{}", s["additionalProperties"], t.Elem())
	case t.Kind() == reflect.Struct:
		c.want(at, s, "object", nullable)
		c.checkStruct(at, s, t)
	default:
		c.want(at, s, jsonType(t.Kind()), nullable)
	}
}

func (c *schemaChecker) checkRef(at, ref string, t reflect.Type, nullable bool) {
	name, ok := strings.CutPrefix(ref, "#/components/schemas/")
	if !ok {
		c.errorf(at, "$ref %s is not a component schema", ref)
		return
	}
	if nullable {
		c.errorf(at, "Go may send null here, which a bare $ref to %s does not allow", name)
	}
	if w, ok := wireTypes[name]; ok && reflect.TypeOf(w) != t {
		c.errorf(at, "refers to %s, whose Go type is %v, but the field is %v", name, reflect.TypeOf(w), t)
		return
	}
	key := name + " " + t.String()
	if c.done[key] {
		return
	}
	c.done[key] = true
	if s, ok := c.schemas[name]; ok {
		c.check(name, s, t, false)
	} else {
		c.errorf(at, "$ref to a missing schema %s", name)
	}
}

func (c *schemaChecker) checkItems(at string, items any, t reflect.Type) {
	switch items := items.(type) {
	case map[string]any:
		c.check(at, items, t, nullableKind(t))
	case bool:
		if t.Kind() != reflect.Interface {
			c.errorf(at, "values are %v, not any JSON value", t)
		}
	default:
		c.errorf(at, "no schema for the %v elements", t)
	}
}

// want checks the schema's type: exactly the one Go sends, plus "null"
// only where Go can send null.
func (c *schemaChecker) want(at string, s map[string]any, want string, nullable bool) {
	var types []string
	switch v := s["type"].(type) {
	case string:
		types = []string{v}
	case []any:
		for _, x := range v {
			types = append(types, fmt.Sprint(x))
		}
	}
	hasNull := slices.Contains(types, "null")
	types = slices.DeleteFunc(types, func(s string) bool { return s == "null" })
	if len(types) != 1 || types[0] != want {
		c.errorf(at, "type %v, but Go sends %s", s["type"], want)
	}
	if hasNull && !nullable {
		c.errorf(at, "allows null, which Go never sends here")
	}
}

func (c *schemaChecker) checkStruct(at string, s map[string]any, t reflect.Type) {
	props, _ := s["properties"].(map[string]any)
	fields := jsonFields(t)
	for name, f := range fields {
		p, ok := props[name].(map[string]any)
		if !ok {
			c.errorf(at, "no property %s (Go field %s)", name, f.name)
			continue
		}
		c.check(at+"."+name, p, f.typ, f.always && nullableKind(f.typ))
	}
	for name := range props {
		if _, ok := fields[name]; !ok {
			c.errorf(at, "property %s is no field of %v", name, t)
		}
	}
	required := map[string]bool{}
	for _, r := range asList(s["required"]) {
		required[r] = true
		if f, ok := fields[r]; ok && !f.always {
			c.errorf(at, "requires %s, which Go leaves out when it is empty", r)
		}
	}
	if !c.answerOnly[at] {
		return
	}
	for name, f := range fields {
		if f.always && !required[name] {
			c.errorf(at, "Go always sends %s; list it in required", name)
		}
	}
}

// wireField is one JSON field of a struct as encoding/json sees it.
type wireField struct {
	name   string // the Go field's
	typ    reflect.Type
	always bool // sent even when empty
}

// jsonFields lists t's JSON fields by name, embedded structs' included.
func jsonFields(t reflect.Type) map[string]wireField {
	out := map[string]wireField{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := strings.Contains(","+opts+",", ",omitzero,") ||
			strings.Contains(","+opts+",", ",omitempty,") && f.Type.Kind() != reflect.Struct
		out[name] = wireField{name: f.Name, typ: f.Type, always: !omit}
	}
	return out
}

// nullableKind says whether encoding/json can write a value of t as null.
func nullableKind(t reflect.Type) bool {
	if t == rawType {
		return true
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return true
	}
	return false
}

func jsonType(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	}
	return "unknown Go kind " + k.String()
}

func asList(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			out = append(out, fmt.Sprint(x))
		}
	}
	return out
}
