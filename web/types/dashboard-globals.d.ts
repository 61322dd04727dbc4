// Globals of the dashboard's page, for its type check (tsconfig.web.json); nothing here is served.

interface GamewireDashboardHooks {
  route: string;
  map: unknown;
  ticks: number;
  [key: string]: unknown;
}

interface Window {
  /** Hooks for the browser tests and for curious users in the console (no secrets in here). */
  gamewireDashboard: GamewireDashboardHooks;
}
