import type { Tracer } from '@opentelemetry/api';
import type { DatabaseContext } from '../sql/database-context.js';
import type { SagaMetrics } from '../telemetry/saga-metrics.js';
import type { DeliveryPool } from './delivery-pool.js';
import type { DispatcherEventListeners } from './dispatcher-events.js';
import type { ResolvedDispatcherOptions } from './dispatcher-options.js';
import type { LeaseKeeper } from './lease-keeper.js';
import type { PendingOutcomes } from './pending-outcomes.js';
import type { RowDeliveries } from './row-deliveries.js';
import type { RowOutcomes } from './row-outcomes.js';
import type { TableRest } from './table-rest.js';

/** The parts of a dispatcher its timer firing and its outbox relay work with. */
export interface DispatchParts {
  readonly context: DatabaseContext;
  readonly options: ResolvedDispatcherOptions;
  readonly metrics: SagaMetrics;
  /** The library's tracer (`saga.timeout`, `saga.publish` spans). */
  readonly tracer: Tracer;
  readonly events: DispatcherEventListeners;
  readonly pool: DeliveryPool;
  readonly leases: LeaseKeeper;
  readonly rest: TableRest;
  readonly pending: PendingOutcomes;
  readonly outcomes: RowOutcomes;
  readonly deliveries: RowDeliveries;
}
