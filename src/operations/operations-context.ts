import type { SagaHandledMessage } from '../entities/saga-handled-message.js';
import type { SagaRuntime } from '../saga/saga-runtime.js';
import type { DatabaseContext, TableNames } from '../sql/database-context.js';
import type { Clock } from '../time/clock.js';
import type { SagaTable } from './saga-table.js';

/** What every operator statement needs: the runtime's database context, the saga tables and the clock. Internal. */
export interface OperationsContext {
  readonly db: DatabaseContext;
  readonly runtime: SagaRuntime;
  readonly clock: Clock;
  readonly sagas: ReadonlyMap<string, SagaTable>;
  /** `saga_handled_message`, which the runtime's context does not name. */
  readonly handledMessages: TableNames<keyof SagaHandledMessage & string>;
}
