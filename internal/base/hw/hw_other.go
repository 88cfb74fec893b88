//go:build !linux

package hw

import "errors"

func kernelRelease() (string, error)       { return "", errors.ErrUnsupported }
func cpuModel() (string, error)            { return "", errors.ErrUnsupported }
func cpuCount() (int, error)               { return 0, errors.ErrUnsupported }
func cgroupLimits() (Limits, error)        { return Limits{}, errors.ErrUnsupported }
func memoryBytes() (uint64, error)         { return 0, errors.ErrUnsupported }
func diskBytes(dir string) (uint64, error) { return 0, errors.ErrUnsupported }
