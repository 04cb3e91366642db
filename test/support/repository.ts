import { join, resolve } from 'node:path';

/** The repository's root folder. */
export const REPO_ROOT = resolve(import.meta.dirname, '..', '..');

/** A path in the repository, from the root. */
export function repoPath(...parts: string[]): string {
  return join(REPO_ROOT, ...parts);
}
