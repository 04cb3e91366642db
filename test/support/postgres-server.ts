import pg from 'pg';

const LOCAL_URL = 'postgres://postgres@127.0.0.1:5432/test';

/** A reachable PostgreSQL server and how to let go of it. */
export interface PostgresServer {
  readonly url: string;
  readonly stop: () => Promise<void>;
}

async function reachable(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  try {
    await client.connect();
    await client.query('select 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** DATABASE_URL, else the local server, else a testcontainers server; throws when none is reachable. */
export async function resolvePostgresUrl(): Promise<PostgresServer> {
  const none = async () => undefined;
  if (process.env.DATABASE_URL) {
    if (await reachable(process.env.DATABASE_URL)) return { url: process.env.DATABASE_URL, stop: none };
    throw new Error(`DATABASE_URL is set but PostgreSQL does not answer there: ${process.env.DATABASE_URL}`);
  }
  if (await reachable(LOCAL_URL)) return { url: LOCAL_URL, stop: none };
  try {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:16-alpine').start();
    return { url: container.getConnectionUri(), stop: async () => void (await container.stop()) };
  } catch (error) {
    throw new Error(
      `No PostgreSQL for the tests: set DATABASE_URL, start a server on 127.0.0.1:5432, or run a Docker engine for testcontainers (${(error as Error).message}).`,
    );
  }
}

/** `url` with its database name replaced by `database`. */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/** Runs one admin statement (CREATE/DROP DATABASE, pg_terminate_backend) on the server's own database. */
export async function adminQuery(url: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}
