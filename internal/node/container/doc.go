// Package container runs container jobs on one node, on command: the
// agent's side of the seed's node engine messages
// {command: deploy|delete|move|replicate, job{...}}. The server carries
// out move and replicate as deletes and deploys on the nodes involved, so
// a node only ever deploys (Manager.Deploy) and deletes (Manager.Delete).
//
// A job runs once, through the Docker Engine API, with the CPU and memory
// limits, environment, command and published ports it asks for. Its status
// goes CREATING → RUNNING → COMPLETED (exit 0) | FAILED (non-zero exit, or
// it could not be started) | DEAD (killed for want of memory, dead in the
// engine, or removed behind nodemgr's back), and → UNDEPLOYED on delete.
// Host ports come from the node's port allocator (Ports) and go back to it
// when the job reaches a final state.
//
// Each job has a small JSON record in the state directory, written before
// the change is reported, and its container carries the labels
// nodemgr.job=<id> and nodemgr.name=<name>. When the agent restarts, a new
// Manager's Run adopts the running containers it finds recorded (same
// container, ports booked again) and gives up any deploy that was cut
// short, removing its container by label. Run follows the containers by
// the engine's event stream, with a periodic reconcile as a safety net,
// and samples their usage; OnChange hears of every change, so that the
// agent can report it to the server.
package container
