package orchestrate

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"

	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
)

// The user data is a #cloud-config that cloud-init (here the EC2 fake's
// reading of it) takes whole: the host key pair matches, the agent's
// config and the script land in /opt/nodemgr, the script is run, and it
// names the digest of each arch and the token it fetches with.
func TestPullUserData(t *testing.T) {
	key, err := newHostKey()
	if err != nil {
		t.Fatal(err)
	}
	p := pullBootstrap{serverURL: "https://nodemgr.example:7070/", token: "nmj_secret'x",
		serverCA:  []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
		artifacts: []Artifact{{Arch: "x86_64", SHA256: "aa11"}, {Arch: "aarch64", SHA256: "bb22"}},
		config:    []byte("server: https://nodemgr.example:7070\njoin_token: nmj_secret'x\n"), hostKey: key, user: "ubuntu"}
	ud, err := p.userData()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ud, "#cloud-config\n") {
		t.Fatalf("user data starts %.30q; want #cloud-config", ud)
	}
	var cc struct {
		SSHKeys    map[string]string                             `yaml:"ssh_keys"`
		WriteFiles []struct{ Path, Content, Permissions string } `yaml:"write_files"`
		RunCmd     [][]string                                    `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal([]byte(ud), &cc); err != nil {
		t.Fatal(err)
	}
	priv, err := ssh.ParsePrivateKey([]byte(cc.SSHKeys["ed25519_private"]))
	if err != nil {
		t.Fatalf("ed25519_private: %v", err)
	}
	if got := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(priv.PublicKey()))); got != cc.SSHKeys["ed25519_public"] || got != key.public {
		t.Errorf("host key pair: private's public %q, ed25519_public %q, pinned %q; want one key", got, cc.SSHKeys["ed25519_public"], key.public)
	}
	files := map[string]string{}
	for _, f := range cc.WriteFiles {
		files[f.Path] = f.Permissions
		if f.Path == AgentDir+"/bootstrap.sh" {
			for _, want := range []string{"x86_64) want=aa11", "aarch64) want=bb22", `token='nmj_secret'\''x'`,
				"server='https://nodemgr.example:7070'", "user='ubuntu'", AgentBinaryPath + "?arch=$arch&machine_id=$id", "sha256sum"} {
				if !strings.Contains(f.Content, want) {
					t.Errorf("bootstrap.sh has no %q:\n%s", want, f.Content)
				}
			}
		}
	}
	for path, mode := range map[string]string{AgentDir + "/agent.yaml": "0600", AgentDir + "/bootstrap.sh": "0700", AgentDir + "/server-ca.crt": "0644"} {
		if files[path] != mode {
			t.Errorf("write_files %s has mode %q, want %q (files: %v)", path, files[path], mode, files)
		}
	}
	if len(cc.RunCmd) != 1 || strings.Join(cc.RunCmd[0], " ") != "/bin/sh "+AgentDir+"/bootstrap.sh" {
		t.Errorf("runcmd = %v; want the bootstrap script", cc.RunCmd)
	}
	if _, err := ec2test.CloudInitScript(ud); err != nil {
		t.Errorf("the EC2 fake cannot run the user data as cloud-init would: %v", err)
	}
	if len(ud) > 16<<10 {
		t.Errorf("user data is %d bytes; EC2 takes 16 KiB at most", len(ud))
	}
}
