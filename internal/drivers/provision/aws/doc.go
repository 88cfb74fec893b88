// Package aws is the "aws" provider: each machine is an EC2 instance,
// on-demand or spot, driven through the AWS SDK for Go v2
// (github.com/aws/aws-sdk-go-v2/service/ec2), never the aws CLI.
//
// Settings (provision.New("aws", settings)):
//
//	region         the EC2 region; default: the standard AWS environment
//	               (AWS_REGION, AWS_DEFAULT_REGION, the profile's region)
//	endpoint       an EC2 endpoint URL other than AWS's (moto, a fake)
//	profile        a profile of the shared AWS config files; credentials
//	               otherwise come from the standard chain (environment,
//	               shared files, SSO, web identity, instance role)
//	address        "public" (default: the public IP, else the private one)
//	               or "private"
//	poll_interval  how often a wait asks EC2 for a state, a Go duration; default 5s
//	wait_timeout   how long Provision waits for running and a verb for its
//	               state, a Go duration; default 10m
//	request_timeout   how long one EC2 API request may take before it fails
//	               (the SDK tries it again), a Go duration; default 20s
//
// Extra keys Provision understands (any other key, such as the template's
// name or diskMB or another provider's override, is ignored):
//
//	ami              an AMI ID (ami-...); image is used instead when it is one
//	image_type       only "ami" (seed 000's mappings set it)
//	ami_lookup       {name, owner, architecture}: the newest available AMI
//	                 (by CreationDate, then name) whose name matches the
//	                 pattern (* and ? wildcards), owned by owner ("amazon",
//	                 "self", an account ID: required, since anyone can name
//	                 an AMI "ubuntu"), for architecture x86_64 (default) or
//	                 arm64. It wins over ami, which wins over image: AMI IDs
//	                 differ per region and architecture, names do not
//	instance_type    an EC2 instance type; without it the provider chooses
//	                 the cheapest type of a small built-in table (t3, c6i,
//	                 m6i, r6i; t4g, c7g, m7g, r7g for arm64) that has at
//	                 least cpu vCPUs and memoryMB MiB, and records which in
//	                 the deployment's Extra (instance_type, and why under chosen)
//	cpu, memoryMB    what the chosen instance type must have at least
//	subnet           a subnet ID (subnet-...), which picks the VPC and zone
//	security_groups  [sg-... IDs, or group names in the default VPC]
//	key_name         an EC2 key pair for ssh
//	user_data        a script or cloud-config run at first boot (the agent's
//	                 bootstrap), as text: the provider base64-encodes it;
//	                 16 KiB at most. The deployment's Extra keeps only its
//	                 size and hash, since it may hold a secret
//	spot             true: a one-time spot instance, terminated (never
//	                 stopped) when AWS takes it back
//	max_price        the most to pay per hour for spot, in USD; default the
//	                 on-demand price
//	hibernation      true: launched with hibernation enabled, so that
//	                 hibernate works (EC2 needs an encrypted root volume
//	                 big enough for the memory)
//	tags             {key: value}, added to the instance's and volumes' tags
//
// A known key holding the wrong type or value is refused as
// errdefs.Field("extra.<key>", ...) before anything is made.
//
// Every instance and its volumes carry the spec's labels as tags, plus
// Name and nodemgr.deployment (the machine name) and nodemgr.template; Find
// lists instances by them (tag:KEY=VALUE filters), terminated ones left
// out, so the orchestrator's leak sweep finds what its owner label marks.
//
// A launch is idempotent: RunInstances gets a ClientToken derived from the
// deployment's ID (the nodemgr.deployment-id label, or the server's
// nodemgr.deployment label, else the machine name), so EC2 never makes two
// instances for a retried call, and Provision first adopts a pending or
// running instance tagged with the same ID. The ID is on the instance as
// nodemgr.deployment-id. Provision returns once EC2 reports the instance running; if it
// fails, times out or is cancelled after the launch, the instance is
// terminated before Provision returns (one launched earlier for the same
// deployment and stopped since is left as it is, and named). Capacity errors
// (InsufficientInstanceCapacity) are errdefs.ErrUnavailable and say what
// to change; they are not retried by the SDK, since retrying at once does
// not help.
//
// Deployments offer exec:ssh, copy:sftp and copy:rsync; their Address is
// the instance's public IP (or private, see the address setting).
//
// Lifecycle follows EC2: start, stop, hibernate (stop with Hibernate),
// reboot and terminate, each waiting for the state it leads to. EC2's
// rules are checked up front, per machine (provision.VerbChecker): a
// one-time spot instance cannot be stopped or hibernated, and only an
// instance launched with hibernation enabled can hibernate. State maps
// EC2's states one to one, except that an instance stopped by hibernation
// is hibernated; StateReason (provision.StateReasoner) adds why, such as
// a spot instance that AWS took back (Server.SpotInstanceTermination).
package aws
