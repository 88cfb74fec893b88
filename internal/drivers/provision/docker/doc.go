// Package docker is the "docker" provider: each machine is a container on
// a Docker engine, driven through the Engine API (the official Go client,
// github.com/moby/moby/client), never the docker CLI.
//
// Settings (provision.New("docker", settings)):
//
//	host          engine address, DOCKER_HOST style (unix:///var/run/docker.sock,
//	              tcp://host:2376); default: $DOCKER_HOST, else the local socket
//	stop_timeout  grace period before stop kills, a Go duration; default the engine's (10s)
//
// Extra keys Provision understands (any other key, such as a template's
// name or diskMB or another provider's override, is ignored):
//
//	image         image reference; required. It must already be on the engine
//	              unless pull is "missing": nodemgr does not pull by default
//	pull          "never" (default) or "missing" (true is "missing")
//	user          user[:group] the container and its execs run as
//	cpu           CPUs, fractions allowed (HostConfig.NanoCPUs)
//	memoryMB      memory limit in MiB (HostConfig.Memory); 0 is no limit
//	env           ["K=V", ...] or {K: V}
//	command       argv list, or a string run by /bin/sh -c
//	entrypoint    argv list, or a single program
//	hostname      the container's hostname
//	labels        {k: v}, added to the container's labels
//	network_mode  bridge (default), host, none, or a network's name
//	privileged    only false is accepted
//
// Without command or entrypoint the container runs a small sh loop that
// keeps it alive (and exits promptly on SIGTERM), whatever the image's
// own command is: a node is a place to exec into. A known key holding the
// wrong type is refused as errdefs.Field("extra.<key>", ...).
//
// Every container carries the spec's labels plus nodemgr.deployment (the
// machine name) and nodemgr.template; Find lists containers by them so
// the server can compare the engine with its store (drift detection).
//
// Provision never leaves a container behind on error: if start fails, or
// the command exits at once, the container is removed before returning.
// Deployments offer exec:docker and copy:docker, which the dockerexec
// executor takes. Lifecycle verbs map onto the engine: start (unpauses a
// paused container), stop, hibernate (pause), reboot (restart) and
// terminate (force remove); engine states map onto EC2's (see State).
package docker
