package api

import "time"

// Deployment is a machine a provider made.
type Deployment struct {
	ID          string            `json:"id"`
	Provider    string            `json:"provider"`
	ResourceID  string            `json:"resource_id"`
	Name        string            `json:"name"`
	Template    string            `json:"template"`
	State       string            `json:"state"` // pending, running, stopping, stopped, shutting-down, terminated, hibernated, failed
	StateReason string            `json:"state_reason,omitempty"`
	Address     string            `json:"address,omitempty"`
	Executors   []string          `json:"executors"`
	Extra       map[string]any    `json:"extra"`
	Labels      map[string]string `json:"labels"`
	// Node is the node whose agent registered from this machine (a pool
	// machine's, bootstrapped by the orchestrator).
	Node      string    `json:"node,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// DeploymentFailed is the state of a deployment whose provisioning failed
// (the provider cleaned up what it had made).
const DeploymentFailed = "failed"

// DeploymentList is the body of GET /v1/deployments.
type DeploymentList struct {
	Deployments []Deployment `json:"deployments"`
	Next        string       `json:"next,omitempty"` // pass as ?after= for the next page; absent on the last
}

// ProvisionRequest is the body of POST /v1/deployments.
type ProvisionRequest struct {
	Template string `json:"template"`
	Provider string `json:"provider"`
	Count    int    `json:"count,omitempty"` // default 1, at most 100
	Name     string `json:"name,omitempty"`  // machine name prefix; default the template's name
}
