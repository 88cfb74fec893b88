// Package catalog is what the coordinator can make machines from and
// reach them with: templates and mapping sets (YAML documents, parsed and
// checked), their rendering for a provider, the provider and executor
// instances (each made once, from its registration record and settings),
// and the deployments the providers made, with their lifecycle and the
// drift check that notices machines changed behind nodemgr's back.
//
// The server's handlers decode, authorize and answer around it; the
// orchestrator reaches it through the server's Cluster.
package catalog
