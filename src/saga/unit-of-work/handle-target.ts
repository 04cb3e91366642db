import type { TimerDelivery } from '../../contracts.js';
import type { SagaPreload } from './saga-preload.js';

/** Where a message goes: the instance with a correlation value, or a timer's own instance. */
export type HandleTarget =
  | { readonly kind: 'correlation'; readonly value: unknown; readonly messageId?: string | undefined }
  | {
      readonly kind: 'timer';
      readonly timer: TimerDelivery;
      /** The saga rows of the timer's claimed batch, read ahead; the first attempt may take its row from here. */
      readonly preload?: SagaPreload | undefined;
    };
