import type { SagaRuntime } from '../saga/saga-runtime.js';
import type { DatabaseContext } from '../sql/database-context.js';
import type { Clock } from '../time/clock.js';
import type { SagaTable } from './saga-table.js';

/** What every operator statement needs: the runtime's database context, its sagas' tables and the clock. Internal. */
export interface OperationsContext {
  readonly db: DatabaseContext;
  readonly runtime: SagaRuntime;
  readonly clock: Clock;
  /** The registered sagas by type, each with its table as the context names it. */
  readonly sagas: ReadonlyMap<string, SagaTable>;
}
