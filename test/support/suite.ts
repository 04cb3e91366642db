import { afterAll, beforeAll } from 'vitest';
import { createTestDatabase, type DialectName, type TestDatabase, type TestEntity } from './databases.js';

/** Creates the file's database before its tests and drops it afterwards; returns a getter. */
export function useDatabase(dialect: DialectName, entities: TestEntity[]): () => TestDatabase {
  let db: TestDatabase | undefined;
  beforeAll(async () => {
    db = await createTestDatabase(dialect, entities);
  });
  afterAll(async () => {
    await db?.dispose();
  });
  return () => {
    if (!db) throw new Error('the test database is not ready');
    return db;
  };
}

/** A promise with its resolve function, to order concurrent units of work without sleeping. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** A short unique key so tests in one database do not see each other's sagas. */
export function uniqueKey(prefix: string): string {
  return `${prefix}-${Math.random().toString(36).slice(2, 10)}`;
}
