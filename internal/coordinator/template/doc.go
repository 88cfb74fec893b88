// Package template reads node templates, the provider-neutral description
// of a machine (seed 000), and renders one for a provider into the flat
// Extra map that the provider consumes.
//
// A template file is strict YAML with the keys name, cpu, memoryMB, diskMB,
// image, user and overrides; overrides holds blocks for all and for each
// provider (local, docker, libvirt, aws). Parse reports any problem as an
// *Error with file, line, column and field.
//
// # Precedence
//
// Render builds Extra in layers; each later layer wins for the keys it sets:
//
//  1. the template fields, under their YAML keys (name, image, user, cpu,
//     memoryMB, diskMB); zero values ("" and 0) are left out so the
//     provider uses its default;
//  2. overrides.all;
//  3. overrides.<provider>;
//  4. the mapping rules (package mapping), in file order and repeated until
//     a pass changes nothing; a matching rule lays down its overrides.all
//     and then its overrides.<provider>. Rules match against Extra as
//     layers 1-3 left it, so a rule sees overrides.<provider>'s image, not
//     the template's.
//
// A value replaces the earlier one whole (lists and maps are not merged)
// and a null value removes the key. Within one layer keys are laid down in
// sorted order, which shows only in the steps. Overrides for other
// providers are ignored. Render also returns the Steps that built Extra, in
// order, so "nodemgr template render" can say which layer set each key.
package template
