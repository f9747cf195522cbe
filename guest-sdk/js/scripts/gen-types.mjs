#!/usr/bin/env node
// Regenerates types/wit/: the TypeScript types of the subs:agent world, as
// componentize-js binds it in a guest, generated from wit/ by the pinned
// jco (`jco guest-types`). Run with `npm run types` after `npm ci`.
//
// (package.json pins @bytecodealliance/preview2-shim to 0.25.0 through
// `overrides`: jco 1.35.0 reads the WIT through that shim, and 0.26 opens
// no directories by default, so `guest-types` could not read `wit/`.)
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const wit = join(here, '..', '..', 'wit');
const out = join(here, 'types', 'wit');
rmSync(out, { recursive: true, force: true });
execFileSync(
  join(here, 'node_modules', '.bin', 'jco'),
  ['guest-types', wit, '--world-name', 'agent', '--out-dir', out, '--quiet'],
  { stdio: 'inherit' },
);
console.log(`wrote ${out}`);
