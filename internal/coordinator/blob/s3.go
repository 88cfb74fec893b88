package blob

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// S3Config says where an S3 store keeps its blobs. Credentials come from
// the standard AWS chain (environment, shared files, SSO, web identity,
// instance role), of Profile when it is set.
type S3Config struct {
	Bucket string // required
	// Prefix goes before every key: blobs are <Prefix>sha256/<hex>. A
	// "/" is added when it lacks one, so "nodemgr" keeps them under
	// nodemgr/.
	Prefix string
	Region string // default: AWS_REGION, the profile's region
	// Endpoint is the URL of an S3-compatible service (MinIO, Ceph,
	// moto); empty means AWS's.
	Endpoint string
	// PathStyle puts the bucket in the URL path rather than the host
	// name, as most S3-compatible services need.
	PathStyle bool
	Profile   string // a profile of the shared AWS config files
	// TempDir is where Put spools content before it uploads it; default
	// os.TempDir(). It needs room for the largest blob.
	TempDir string
}

// S3 is a Store in an S3 bucket, for server replicas that share their
// blobs. Put spools the content to a temporary file first, so that the
// digest is known and checked, and the size cap enforced, before a byte
// is uploaded; it uploads nothing when the blob is there already.
//
// S3 has no cheap "touch": a repeated Put refreshes the object's
// LastModified by copying it onto itself (CopyObject, server side). One
// PutObject or CopyObject takes at most 5 GiB, so keep the size cap
// below that. Open checks what it reads against the digest, since
// others can write to a shared bucket.
type S3 struct {
	client  *s3.Client
	bucket  string
	prefix  string // ends in "/" or is empty
	where   string // the endpoint, for messages
	tempDir string
	// blobs serializes this process's writes of one blob: the first Put
	// uploads it and those waiting then find it and only touch it, so it
	// goes up once; and no copy of a key overlaps another write of it,
	// which some S3 servers (moto) fail with a 500.
	blobs keyLocks
}

// keyLocks are mutexes by key, kept while someone holds or waits for one.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int // holding or waiting
}

// lock takes key's mutex and returns its unlock.
func (k *keyLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{}
		k.m[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// NewS3 returns the store cfg describes, after checking that its bucket
// answers (HeadBucket): a wrong bucket, endpoint or credential fails at
// startup, not at the first upload.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errdefs.Field("bucket", "no bucket: name the S3 bucket that holds the blobs")
	}
	if cfg.Endpoint != "" && !strings.HasPrefix(cfg.Endpoint, "http://") && !strings.HasPrefix(cfg.Endpoint, "https://") {
		return nil, errdefs.Field("endpoint", "%q is not an http:// or https:// URL", cfg.Endpoint)
	}
	client, region, err := newS3Client(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &S3{client: client, bucket: cfg.Bucket, prefix: cfg.Prefix, where: cfg.Endpoint, tempDir: cfg.TempDir}
	if s.prefix != "" && !strings.HasSuffix(s.prefix, "/") {
		s.prefix += "/"
	}
	if s.where == "" {
		s.where = "AWS S3 in " + region
	}
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket}); err != nil {
		err = s.classify(err)
		if errdefs.IsNotFound(err) {
			err = errdefs.NotFound("bucket %q at %s (create it, or name another)", s.bucket, s.where)
		}
		return nil, fmt.Errorf("s3 blob store: %w", err)
	}
	return s, nil
}

// newS3Client loads the AWS configuration for cfg; it contacts nothing.
func newS3Client(ctx context.Context, cfg S3Config) (*s3.Client, string, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	if cfg.Profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(cfg.Profile))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, "", fmt.Errorf("s3 blob store: load the AWS configuration: %w", errdefs.Class(err, errdefs.ErrInvalid))
	}
	if awsCfg.Region == "" {
		return nil, "", errdefs.Field("region", "no region: set it, or AWS_REGION, or a region in the AWS profile")
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = awssdk.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// The SDK's default CRC checksums trip some S3-compatible
		// services; Put sends the SHA-256 it has anyway, and Open
		// checks it.
		o.RequestChecksumCalculation = awssdk.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = awssdk.ResponseChecksumValidationWhenRequired
	})
	return client, awsCfg.Region, nil
}

func (s *S3) key(d Digest) string { return s.prefix + algorithm + "/" + d.Hex() }

// Put stores r's content; see Store.
func (s *S3) Put(ctx context.Context, r io.Reader, want Digest, maxSize int64) (Info, error) {
	info, err := s.put(ctx, r, want, maxSize)
	if err != nil {
		return Info{}, fmt.Errorf("put blob: %w", err)
	}
	return info, nil
}

func (s *S3) put(ctx context.Context, r io.Reader, want Digest, maxSize int64) (Info, error) {
	if !want.IsZero() {
		// Stored already: hash the stream without spooling it, only to
		// hold the caller to want.
		modTime, err := s.touch(ctx, want)
		if err == nil {
			info, err := copyHashed(ctx, io.Discard, r, want, maxSize)
			if err != nil {
				return Info{}, err
			}
			info.ModTime = modTime
			return info, nil
		}
		if !errdefs.IsNotFound(err) {
			return Info{}, err
		}
	}
	tmp, err := os.CreateTemp(s.tempDir, "nodemgr-blob-*")
	if err != nil {
		return Info{}, fmt.Errorf("spool: %w", errdefs.FromOS(err))
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	info, err := copyHashed(ctx, tmp, r, want, maxSize)
	if err != nil {
		return Info{}, errdefs.FromOS(err)
	}
	defer s.blobs.lock(info.Digest.String())()
	if modTime, err := s.copyOnto(ctx, info.Digest); err == nil {
		info.ModTime = modTime
		return info, nil
	} else if !errdefs.IsNotFound(err) {
		return Info{}, err
	}
	if err := s.upload(ctx, tmp, info); err != nil {
		return Info{}, err
	}
	info.ModTime = time.Now() // S3's clock says when; not worth a HeadObject
	return info, nil
}

// upload sends the spooled content of a blob.
func (s *S3) upload(ctx context.Context, f *os.File, info Info) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           awssdk.String(s.key(info.Digest)),
		Body:          f,
		ContentLength: awssdk.Int64(info.Size),
		ContentType:   awssdk.String("application/octet-stream"),
		// S3 checks the bytes it got against the digest we checked.
		ChecksumSHA256: awssdk.String(base64.StdEncoding.EncodeToString(info.Digest.sum[:])),
	})
	return s.classify(err)
}

// touch refreshes a stored blob's LastModified by copying the object onto
// itself, and returns the new one; errdefs.ErrNotFound when there is no
// such blob. REPLACE is what lets S3 copy an object onto itself.
func (s *S3) touch(ctx context.Context, d Digest) (time.Time, error) {
	defer s.blobs.lock(d.String())()
	return s.copyOnto(ctx, d)
}

// copyOnto copies d's object onto itself, which sets its time to now.
func (s *S3) copyOnto(ctx context.Context, d Digest) (time.Time, error) {
	out, err := s.client.CopyObject(ctx, &s3.CopyObjectInput{
		Bucket:            &s.bucket,
		Key:               awssdk.String(s.key(d)),
		CopySource:        awssdk.String(s.copySource(d)),
		MetadataDirective: types.MetadataDirectiveReplace,
		ContentType:       awssdk.String("application/octet-stream"),
	})
	if err != nil {
		return time.Time{}, s.classify(err)
	}
	if out.CopyObjectResult != nil && out.CopyObjectResult.LastModified != nil {
		return *out.CopyObjectResult.LastModified, nil
	}
	return time.Now(), nil
}

// copySource names d's object as CopyObject wants it: URL-encoded, for a
// prefix may hold any character.
func (s *S3) copySource(d Digest) string {
	parts := strings.Split(s.bucket+"/"+s.key(d), "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// Stat describes a blob; see Store.
func (s *S3) Stat(ctx context.Context, d Digest) (Info, error) {
	if err := checkDigest(d); err != nil {
		return Info{}, fmt.Errorf("stat blob: %w", err)
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: awssdk.String(s.key(d))})
	if err != nil {
		return Info{}, fmt.Errorf("stat blob: %w", s.blobError(d, err))
	}
	return Info{Digest: d, Size: awssdk.ToInt64(out.ContentLength), ModTime: awssdk.ToTime(out.LastModified)}, nil
}

// Open returns a blob's content; see Store. Reading it to the end fails
// if the object does not hash to d.
func (s *S3) Open(ctx context.Context, d Digest) (io.ReadCloser, Info, error) {
	if err := checkDigest(d); err != nil {
		return nil, Info{}, fmt.Errorf("open blob: %w", err)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: awssdk.String(s.key(d))})
	if err != nil {
		return nil, Info{}, fmt.Errorf("open blob: %w", s.blobError(d, err))
	}
	info := Info{Digest: d, Size: awssdk.ToInt64(out.ContentLength), ModTime: awssdk.ToTime(out.LastModified)}
	return &verifier{body: out.Body, h: sha256.New(), want: d, where: s.bucket + "/" + s.key(d)}, info, nil
}

// Delete removes a blob; see Store. S3 answers a delete of a missing key
// with success.
func (s *S3) Delete(ctx context.Context, d Digest) error {
	if err := checkDigest(d); err != nil {
		return fmt.Errorf("delete blob: %w", err)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: awssdk.String(s.key(d))})
	if err != nil {
		return fmt.Errorf("delete blob %s: %w", d, s.classify(err))
	}
	return nil
}

// Walk calls fn for every blob, in the key order S3 lists them, which is
// digest order; see Store. Keys under the prefix that are not blobs are
// skipped.
func (s *S3) Walk(ctx context.Context, fn func(Info) error) error {
	dir := s.prefix + algorithm + "/"
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &dir})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("walk blobs: %w", s.classify(err))
		}
		for _, obj := range page.Contents {
			d, err := ParseDigest(algorithm + ":" + strings.TrimPrefix(awssdk.ToString(obj.Key), dir))
			if err != nil {
				continue // not a blob of ours
			}
			if err := fn(Info{Digest: d, Size: awssdk.ToInt64(obj.Size), ModTime: awssdk.ToTime(obj.LastModified)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// blobError is classify's error, or a plain not-found naming d.
func (s *S3) blobError(d Digest, err error) error {
	err = s.classify(err)
	if errdefs.IsNotFound(err) {
		return errdefs.NotFound("blob %s", d)
	}
	return err
}

// classify gives an SDK error its class: a missing key or bucket is not
// found, a refused credential permission, a throttle, a server fault or
// no answer at all unavailable. A cancelled or timed-out context is kept
// as it is.
func (s *S3) classify(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		var send *smithyhttp.RequestSendError
		if errors.As(err, &send) {
			return errdefs.Class(fmt.Errorf("no answer from %s (check the endpoint, the network, and that the service is up): %w", s.where, send.Err), errdefs.ErrUnavailable)
		}
		return err // such as no credentials: the SDK's text says it
	}
	var class error
	switch code := ae.ErrorCode(); {
	case code == "NoSuchKey", code == "NotFound", code == "NoSuchBucket":
		class = errdefs.ErrNotFound
	case code == "AccessDenied", code == "Forbidden", code == "InvalidAccessKeyId", code == "SignatureDoesNotMatch",
		code == "ExpiredToken", code == "InvalidToken", code == "AllAccessDisabled":
		class = errdefs.ErrPermission
	case code == "SlowDown", code == "ServiceUnavailable", code == "InternalError", code == "RequestTimeout",
		ae.ErrorFault() == smithy.FaultServer, httpStatus(err) >= 500:
		class = errdefs.ErrUnavailable
	case code == "EntityTooLarge", code == "BadDigest", code == "InvalidDigest":
		class = errdefs.ErrInvalid
	default:
		return err
	}
	return &s3Error{code: ae.ErrorCode(), msg: ae.ErrorMessage(), where: s.where, err: err, class: class}
}

// s3Error is an error S3 answered: its code and message, without the
// SDK's transport preamble, in one of nodemgr's classes.
type s3Error struct {
	code, msg, where string
	err              error // the SDK's
	class            error
}

func (e *s3Error) Error() string   { return fmt.Sprintf("%s at %s: %s", e.code, e.where, e.msg) }
func (e *s3Error) Unwrap() []error { return []error{e.err, e.class} }

// httpStatus is the HTTP status of S3's answer, 0 if there was none.
func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// verifier hashes a blob's content as it is read, and fails the read
// that reaches the end if the content does not hash to the digest.
type verifier struct {
	body  io.ReadCloser
	h     hash.Hash
	want  Digest
	where string
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.body.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		var got Digest
		v.h.Sum(got.sum[:0])
		if got != v.want {
			return n, fmt.Errorf("read blob %s: s3://%s holds content that hashes to %s; it was changed outside nodemgr: delete it and put it again", v.want, v.where, got)
		}
	}
	return n, err
}

func (v *verifier) Close() error { return v.body.Close() }

var _ Store = (*S3)(nil)
