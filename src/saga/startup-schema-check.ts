import type { EntityManager } from '@mikro-orm/core';
import { SagaSchemaError } from '../errors.js';
import { verifySagaSchema, verifySagaSchemaThrough } from '../schema/verify-saga-schema.js';
import type { SagaLogger } from '../telemetry/logger.js';
import type { AnySagaDefinition } from './registered-saga.js';

/** What the start-up check reads: the runtime's EntityManager and sagas, and where it says it passed. */
export interface StartupSchemaCheckOptions {
  readonly em: EntityManager;
  readonly sagas: readonly AnySagaDefinition[];
  readonly logger: SagaLogger;
}

/**
 * A runtime's start-up schema check: it runs until it passes once, then never again. A check that fails for another
 * reason than the schema (the database is away) is not held against the schema: the caller's own statements report
 * that failure, and the check runs again next time.
 */
export class StartupSchemaCheck {
  private inFlight: Promise<void> | undefined;
  private passed = false;

  constructor(private readonly options: StartupSchemaCheckOptions) {}

  /** Checks on a pooled connection, unless a check passed already; callers at once share one check. */
  async once(): Promise<void> {
    if (this.passed) return;
    const { em, sagas, logger } = this.options;
    this.inFlight ??= verifySagaSchema({ em, sagas }).then(() =>
      logger.info('saga schema verified', { sagaTypes: sagas.map((saga) => saga.name) }),
    );
    try {
      await this.inFlight;
      this.passed = true;
    } catch (error) {
      this.inFlight = undefined;
      if (error instanceof SagaSchemaError) throw error;
    }
  }

  /**
   * For a unit joined to the application's transaction: reads the catalog through `em`, on the transaction's
   * connection, unless a check passed already. It never waits for a check in flight on a pooled connection, which on
   * SQLite's one connection would wait for the application's transaction itself.
   */
  async through(em: EntityManager): Promise<void> {
    if (this.passed) return;
    await verifySagaSchemaThrough({ em: this.options.em, sagas: this.options.sagas }, em);
    this.passed = true;
  }
}
