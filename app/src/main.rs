use clap::Parser;
use stock_app::{Application, Settings, telemetry};

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    telemetry::init("info,sqlx=warn");
    let settings = Settings::parse();
    let bind = settings.bind.clone();
    let app = Application::build(settings).await?;
    let host = bind.rsplit_once(':').map_or("127.0.0.1", |(host, _)| host);
    // Scripts that start the service on port 0 read this line to find it.
    println!("stock-app listening on http://{host}:{}", app.port());
    app.run_until_stopped().await?;
    Ok(())
}
