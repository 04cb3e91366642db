import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { resolvePostgresUrl } from './postgres-server.js';
import { REPO_ROOT } from './repository.js';

/**
 * Finds the PostgreSQL server every test file creates its own database on: DATABASE_URL, else the local
 * server on 127.0.0.1:5432, else a testcontainers PostgreSQL when a Docker engine is reachable.
 * No server is a failure, never a skip.
 *
 * Names the folder (under .tmp, in the repository and in the MikroORM 7 leg) where the test files that install the
 * package share this run's tarball and install (test/support/packed-package.ts), and removes it after the run.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server = await resolvePostgresUrl();
  project.provide('postgresUrl', server.url);
  const packagingRunFolder = `packaging-run-${randomUUID().slice(0, 8)}`;
  project.provide('packagingRunFolder', packagingRunFolder);
  return async () => {
    try {
      for (const home of [REPO_ROOT, join(REPO_ROOT, 'legs', 'mikro-orm-7')]) {
        await rm(join(home, '.tmp', packagingRunFolder), { recursive: true, force: true });
      }
    } finally {
      await server.stop();
    }
  };
}

declare module 'vitest' {
  export interface ProvidedContext {
    postgresUrl: string;
    packagingRunFolder: string;
  }
}
