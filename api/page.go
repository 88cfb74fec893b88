package api

import (
	"bytes"
	"encoding/json"
)

// A list is an object whose array is named after what it holds, with the
// cursor of the next page where it pages: {"nodes": [...], "next": "..."}.

// DecodeList reads the array at key of a list, or a bare array: agents and
// servers before one shape of lists answered some lists so.
func DecodeList[T any](raw []byte, key string) ([]T, error) {
	var out []T
	if b := bytes.TrimSpace(raw); len(b) > 0 && b[0] == '[' {
		err := json.Unmarshal(b, &out)
		return out, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	if list, ok := obj[key]; ok {
		if err := json.Unmarshal(list, &out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// The lists that page (GET with ?limit= and ?after=) each say what their
// page holds, so that one piece of code pages through any of them
// (client.All).

// Page returns the page's nodes and the cursor of the next page ("" on
// the last).
func (l NodeList) Page() ([]Node, string) { return l.Nodes, l.Next }

// Page returns the page's users and the cursor of the next page ("" on
// the last).
func (l UserList) Page() ([]User, string) { return l.Users, l.Next }

// Page returns the page's tokens and the cursor of the next page ("" on
// the last).
func (l TokenList) Page() ([]Token, string) { return l.Tokens, l.Next }

// Page returns the page's suites and the cursor of the next page ("" on
// the last).
func (l SuiteList) Page() ([]Suite, string) { return l.Suites, l.Next }

// Page returns the page's tasks and the cursor of the next page ("" on
// the last).
func (l TaskList) Page() ([]Task, string) { return l.Tasks, l.Next }

// Page returns the page's documents and the cursor of the next page ("" on
// the last).
func (l DocumentList) Page() ([]Document, string) { return l.Items, l.Next }

// Page returns the page's deployments and the cursor of the next page ("" on
// the last).
func (l DeploymentList) Page() ([]Deployment, string) { return l.Deployments, l.Next }

// Page returns the page's pools and the cursor of the next page ("" on
// the last).
func (l PoolList) Page() ([]Pool, string) { return l.Pools, l.Next }

// Page returns the page's events and the cursor of the next page ("" on
// the last).
func (l PoolEventList) Page() ([]PoolEvent, string) { return l.Events, l.Next }

// Page returns the page's containers and the cursor of the next page ("" on
// the last).
func (l ContainerList) Page() ([]Container, string) { return l.Containers, l.Next }
