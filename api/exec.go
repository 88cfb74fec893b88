package api

// ExecRequest is the body of POST /v1/deployments/{deployment}/exec.
type ExecRequest struct {
	Argv    []string `json:"argv"`
	Env     []string `json:"env,omitempty"`     // KEY=VALUE, added to the node's environment
	Dir     string   `json:"dir,omitempty"`     // working directory on the node; "" for its default
	Timeout string   `json:"timeout,omitempty"` // Go duration; "" for none
	Stdin   []byte   `json:"stdin,omitempty"`   // base64 in JSON; at most 16 MiB
	// Via names the executor (local, docker, ssh, sftp, rsync); the
	// deployment must carry its capability. "" for the first exec:
	// capability the deployment carries.
	Via string `json:"via,omitempty"`
}

// ExecEvent is one line of the NDJSON stream that answers an exec: a
// chunk of output as the command wrote it, or, last, its exit code or the
// error that kept it from running or cut it off.
type ExecEvent struct {
	Stream string `json:"stream,omitempty"` // "stdout" or "stderr"
	Data   []byte `json:"data,omitempty"`   // base64 in JSON
	Exit   *int   `json:"exit,omitempty"`
	Error  string `json:"error,omitempty"`
	Code   string `json:"code,omitempty"` // the error's class, as in Error.Code, or CodeTimeout
}

// CodeTimeout is the code of an exec's error when its Timeout cut the
// command off.
const CodeTimeout = "timeout"
