import type { TimerDelivery } from '../../contracts.js';
import type { SagaPreload } from './saga-preload.js';

/** A claimed staged delivery (`saga_inbox` row) a unit of work stamps in its own transaction, by token. */
export interface StagedClaim {
  readonly id: string;
  readonly token: string;
}

/** Where a message goes: the instance with a correlation value, or a timer's own instance. */
export type HandleTarget =
  | {
      readonly kind: 'correlation';
      readonly value: unknown;
      readonly messageId?: string | undefined;
      /** The staged delivery the message came from: stamped with the unit of work, only while its claim holds. */
      readonly staged?: StagedClaim | undefined;
    }
  | {
      readonly kind: 'timer';
      readonly timer: TimerDelivery;
      /** The saga rows of the timer's claimed batch, read ahead; the first attempt may take its row from here. */
      readonly preload?: SagaPreload | undefined;
    };
