import type { TestProject } from 'vitest/node';
import { resolvePostgresUrl } from './postgres-server.js';

/**
 * Finds the PostgreSQL server every test file creates its own database on: DATABASE_URL, else the local
 * server on 127.0.0.1:5432, else a testcontainers PostgreSQL when a Docker engine is reachable.
 * No server is a failure, never a skip.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server = await resolvePostgresUrl();
  project.provide('postgresUrl', server.url);
  return server.stop;
}

declare module 'vitest' {
  export interface ProvidedContext {
    postgresUrl: string;
  }
}
